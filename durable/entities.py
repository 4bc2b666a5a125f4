"""Entities: durable state per key, changed by named operations applied one at a time.

Service functions like those of :mod:`durable.api`, thin wrappers over the
default :class:`~durable.client.Client`. Declare an entity with
:func:`durable.entity`; from a workflow use ``ctx.call_entity`` and
``ctx.signal_entity`` (checkpointed, so a replay never applies twice).

Guarantees: the operations of one ``(name, key)`` are applied one at a
time, in the order they take the entity's lock, each exactly once per op id
(its state change and its result commit together); different keys proceed
in parallel on PostgreSQL (SQLite has one writer at a time); a handler that
raises fails only its own operation.
"""

from __future__ import annotations

from typing import Any

from durable import runtime
from durable.engine.plan_entities import EntityOpRecord


def call_entity(
    name: Any, key: Any, op: str, arg: Any = None, *, timeout: float | None = 30.0, op_id: str | None = None
) -> Any:
    """Apply operation ``op`` with ``arg`` to entity ``name``'s ``key`` and return the handler's result.

    The operation is applied before this returns, under the entity's lock,
    with its new state and its result recorded in one transaction. ``timeout``
    is how long to wait for that lock in seconds (None: as long as the
    database waits); past it :class:`~durable.EntityTimeout` is raised and
    nothing is written. A handler that raises leaves the state unchanged,
    records the failure on the op and raises :class:`~durable.EntityOpFailed`
    here. ``op_id`` (default: a new one) makes the call idempotent: an id
    still in the entity's op log (its last ``history`` ops) returns the
    recorded result (or raises the recorded error) without applying again,
    so a step can pass ``durable.current_step().step_id``. Unknown entities
    or operations raise :class:`~durable.EntityNotFound`, an argument that
    is not JSON :class:`~durable.InvalidInput`; nothing is written then.
    """
    return runtime.client().call_entity(name, key, op, arg, timeout=timeout, op_id=op_id)


def signal_entity(name: Any, key: Any, op: str, arg: Any = None, *, op_id: str | None = None) -> None:
    """Apply ``op`` to the entity like :func:`call_entity`, without a result.

    The operation is applied (and durable) when this returns; a handler's
    error is recorded on the op and never raised here. It waits up to 30
    seconds for the entity's lock (:class:`~durable.EntityTimeout`, nothing
    written). Bad names and arguments raise as in :func:`call_entity`.
    """
    runtime.client().signal_entity(name, key, op, arg, op_id=op_id)


def get_entity_state(name: Any, key: Any) -> Any:
    """The state of entity ``name``'s ``key`` as the last committed operation left it.

    A key no operation was applied to reads as the entity's initial state
    (nothing is written). Reads do not take the entity's lock.
    """
    return runtime.client().get_entity_state(name, key)


def entity_ops(name: Any, key: Any, limit: int = 100) -> list[EntityOpRecord]:
    """The newest operations applied to entity ``name``'s ``key`` (at most ``limit``), newest first.

    The op log keeps an entity's last ``history`` operations (1,000 unless
    ``@durable.entity(history=...)`` says otherwise).
    """
    return runtime.client().entity_ops(name, key, limit)
