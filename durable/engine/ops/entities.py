"""``ctx.call_entity`` and ``ctx.signal_entity``: entity operations checkpointed in the run's history.

The operation is applied in the turn, in one transaction with the checkpoint
that records it (as ``ctx.transaction`` does): either both commit or
neither, so a turn that dies afterwards replays the recorded result and a
turn that dies before leaves the entity untouched. The op id is
deterministic (``<run_id>:<seq>``) as well, so even an application whose
checkpoint were lost would be answered from the entity's op log (within its
``history``) instead of applied twice.

The checkpoint (kind ``entity``, named ``<entity>.<op>``, input ``{"key",
"arg"}``) records the result; a handler's error is recorded ``failed`` and
raised again on replay as :class:`~durable.EntityOpFailed` (by
``call_entity``; ``signal_entity`` records its op ``completed`` and never
raises it). A lock wait past ``timeout`` is recorded failed too and raises
:class:`~durable.EntityTimeout`, again on replay.
"""

from __future__ import annotations

from typing import Any

from durable.engine.history import COMPLETED
from durable.engine.ops.base import OpsBase
from durable.engine.plan_entities import EntityApplied, entity_call, result_of
from durable.engine.ports import CheckpointRecord, CheckpointWrite
from durable.engine.serialization import error_record
from durable.engine.vocab import CheckpointKind, EntityOpStatus
from durable.exceptions import EngineFault, EntityOpFailed, EntityTimeout, InvalidInput

ENTITY = CheckpointKind.ENTITY
TIMED_OUT = "entity_timeout"
SIGNAL_TIMEOUT = 30.0


class EntityOps(OpsBase):
    def call_entity(self, name: Any, key: Any, op: str, arg: Any = None, *, timeout: float | None = 30.0) -> Any:
        """Apply ``op`` to entity ``name``'s ``key`` once and return its result (recorded and replayed).

        A handler that raises fails only that op: :class:`~durable.EntityOpFailed`
        is raised here (and again on replay). ``timeout``: seconds to wait for
        the entity's lock, then :class:`~durable.EntityTimeout` (on SQLite the
        connection's busy timeout applies instead).
        """
        return self._entity_op(name, key, op, arg, timeout, signal=False)

    def signal_entity(self, name: Any, key: Any, op: str, arg: Any = None) -> None:
        """Apply ``op`` to the entity once, without a result; a handler's error is recorded on the op only."""
        self._entity_op(name, key, op, arg, SIGNAL_TIMEOUT, signal=True)

    def _entity_op(self, name: Any, key: Any, op: str, arg: Any, timeout: float | None, *, signal: bool) -> Any:
        entity = self._engine.registry.get_entity(name)
        if not isinstance(op, str):
            raise InvalidInput(f"entity {entity.name!r}: the operation name must be a string, got {op!r}")
        label = f"{entity.name}.{op}"
        seq, cp = self._next(label, ENTITY)
        if cp is not None:
            return self._entity_replay(cp, entity.name, signal)
        call = entity_call(
            entity,
            key,
            op,
            arg,
            op_id=f"{self.run_id}:{seq}",
            timeout=timeout,
            max_bytes=self._engine.settings.max_payload_bytes,
        )
        port, store = self._port, self._engine.store
        port.flush()
        started = self._clock.now()
        call_input = {"key": call.key, "arg": call.arg}
        try:
            with store.atomic():
                applied = store.apply_entity_op(call, started)
                port.defer(self._entity_record(seq, label, applied, call_input, started, signal))
                port.flush()
        except EntityTimeout as exc:
            port.discard(seq)
            err = error_record(exc, code=TIMED_OUT, retryable=False)
            history = self._history
            port.defer(
                history.failed(seq, label, ENTITY, err, create=True, input=call_input, attempts=1, started_at=started)
            )
            port.flush()
            raise
        except Exception as exc:  # the database, not the workflow: abandon the turn (nothing committed)
            port.discard(seq)
            raise EngineFault(exc) from exc
        return None if signal else result_of(applied)

    def _entity_record(
        self, seq: int, label: str, applied: EntityApplied, call_input: Any, started: Any, signal: bool
    ) -> CheckpointWrite:
        op, history = applied.op, self._history
        fields: dict[str, Any] = {"create": True, "input": call_input, "attempts": 1, "started_at": started}
        if op.status == EntityOpStatus.FAILED and not signal:
            return history.failed(seq, label, ENTITY, op.error or {}, **fields)
        return history.completed(seq, label, ENTITY, output=None if signal else op.result, **fields)

    @staticmethod
    def _entity_replay(cp: CheckpointRecord, name: str, signal: bool) -> Any:
        if cp.status == COMPLETED:
            return cp.output
        error = cp.error or {}
        key = str((cp.input or {}).get("key", ""))
        if error.get("code") == TIMED_OUT:
            raise EntityTimeout(name, key, None)
        if signal:
            return None
        raise EntityOpFailed(name, key, cp.name.removeprefix(f"{name}."), error)
