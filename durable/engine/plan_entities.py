"""One entity operation, decided once: a pure function from the entity's state to the rows to write.

A store executes :class:`EntityCall` as one transaction (see
:meth:`durable.engine.ports.Store.apply_entity_op`):

1. create the entity's row from ``initial`` if it has none (insert or
   ignore: two first callers make one row), then lock it (``SELECT ... FOR
   UPDATE``; SQLite's one write lock; the memory store's lock), waiting at
   most ``timeout`` seconds (:class:`~durable.EntityTimeout`, nothing written);
2. if ``op_id`` is in the entity's op log, answer from the log: the op was
   applied already (exactly once), nothing is written;
3. else :func:`plan_entity_op` runs the handler on a deep copy of the state
   and the store writes what it decided together: the entity's new state and
   op counter, the op's log row (its position ``seq``, result or error), and
   the deletion of the log rows older than the entity's ``history``.

Guarantees, whoever executes the plan: the operations of one key are applied
one at a time, in the order their transactions take the lock, at positions
1, 2, 3... without gaps (a failed operation takes its position too); the
state and the result (or error) of an operation commit together or not at
all; a handler that raises (or returns something that is not JSON) leaves the
state as it was and fails only its own operation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable.engine.entities import Apply, EntityDef, check_key
from durable.engine.serialization import error_record, to_json
from durable.engine.vocab import EntityOpStatus
from durable.exceptions import EntityOpFailed, InvalidInput


@dataclass(frozen=True)
class EntityRecord:
    """An entity's row: its state and how many operations were applied to it (the last ``seq``)."""

    name: str
    key: str
    state: Any
    ops: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class EntityOpRecord:
    """One applied operation as its op log row keeps it (``status`` completed or failed)."""

    name: str
    key: str
    op_id: str
    seq: int
    op: str
    arg: Any
    status: str
    result: Any
    error: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True)
class EntityCall:
    """What a caller asks: apply ``op`` (``apply``) with ``arg`` to ``(name, key)`` under id ``op_id``.

    ``initial`` is the state a new key starts from (JSON); ``history`` how
    many log rows the key keeps; ``timeout`` how many seconds to wait for the
    entity's lock (None: as long as the database waits).
    """

    name: str
    key: str
    op_id: str
    op: str
    arg: Any
    initial: Any
    apply: Apply
    history: int
    timeout: float | None = None
    max_bytes: int | None = None


@dataclass(frozen=True)
class EntityApplied:
    """The outcome of :meth:`Store.apply_entity_op`: the op's log row and the entity's state after it.

    ``replayed``: the op id was already in the log, so nothing was applied
    now and ``op`` is what the first application recorded.
    """

    op: EntityOpRecord
    state: Any
    replayed: bool = False


@dataclass(frozen=True)
class EntityOpPlan:
    """The rows one operation writes: the op row at ``seq`` and the entity's ``state`` (unchanged if it failed).

    Log rows with ``seq <= prune_through`` are deleted with it (0: none).
    """

    seq: int
    status: EntityOpStatus
    result: Any
    error: dict[str, Any] | None
    state: Any
    prune_through: int


def plan_entity_op(call: EntityCall, state: Any, applied: int) -> EntityOpPlan:
    """Run the handler on a copy of ``state`` (the entity has ``applied`` ops) and decide what to write."""
    seq = applied + 1
    prune = max(seq - call.history, 0)
    what = f"entity {call.name!r} operation {call.op!r}"
    try:
        new_state, result = call.apply(copy.deepcopy(state), call.arg)
        new_state = to_json(new_state, f"the state after {what}", max_bytes=call.max_bytes)
        result = to_json(result, f"the result of {what}", max_bytes=call.max_bytes)
    except Exception as exc:  # noqa: BLE001 - the handler's error fails this operation only, recorded on its row
        return EntityOpPlan(seq, EntityOpStatus.FAILED, None, error_record(exc, retryable=False), state, prune)
    return EntityOpPlan(seq, EntityOpStatus.COMPLETED, result, None, new_state, prune)


def op_record(call: EntityCall, plan: EntityOpPlan, now: datetime) -> EntityOpRecord:
    """The log row ``plan`` writes for ``call``."""
    name, key, op_id, op, arg = call.name, call.key, call.op_id, call.op, call.arg
    return EntityOpRecord(name, key, op_id, plan.seq, op, arg, plan.status, plan.result, plan.error, now)


def entity_call(
    entity: EntityDef,
    key: Any,
    op: Any,
    arg: Any,
    *,
    op_id: str,
    timeout: float | None,
    max_bytes: int | None = None,
) -> EntityCall:
    """The validated call of ``op`` on ``entity``'s ``key`` (raises before anything is written)."""
    key = check_key(entity.name, key)
    found = entity.op(op, arg)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise InvalidInput(f"timeout must be None or a non-negative number of seconds, got {timeout!r}")
    value = to_json(arg, f"argument of entity {entity.name!r} operation {op!r}", max_bytes=max_bytes)
    return EntityCall(
        name=entity.name,
        key=key,
        op_id=op_id,
        op=op,
        arg=value,
        initial=entity.initial_state(),
        apply=found.apply,
        history=entity.history,
        timeout=timeout,
        max_bytes=max_bytes,
    )


def result_of(applied: EntityApplied) -> Any:
    """The op's result, or :class:`~durable.EntityOpFailed` with its recorded error."""
    op = applied.op
    if op.status == EntityOpStatus.FAILED:
        raise EntityOpFailed(op.name, op.key, op.op, op.error or {})
    return op.result
