"""Entities from outside a workflow: apply an operation, signal one, read the state.

Both ``call_entity`` and ``signal_entity`` apply the operation before they
return, in one transaction of their own (a savepoint of the caller's, when
called inside ``transaction.atomic()``: the operation then commits or rolls
back with the caller's writes, and the entity stays locked until then).
"""

from __future__ import annotations

import uuid
from typing import Any

from durable.client.base import ClientBase
from durable.engine.entities import check_key
from durable.engine.plan_entities import EntityApplied, EntityOpRecord, entity_call, result_of
from durable.validation import check_id, check_limit

#: How long ``signal_entity`` waits for the entity's lock (seconds) before giving up.
SIGNAL_TIMEOUT = 30.0


class EntitiesMixin(ClientBase):
    """Operations on entities (see :func:`durable.call_entity`)."""

    def call_entity(
        self, name: Any, key: Any, op: str, arg: Any = None, *, timeout: float | None = 30.0, op_id: str | None = None
    ) -> Any:
        """Apply ``op`` to the entity and return its result (see :func:`durable.call_entity`)."""
        return result_of(self._apply_entity(name, key, op, arg, timeout, op_id))

    def signal_entity(self, name: Any, key: Any, op: str, arg: Any = None, *, op_id: str | None = None) -> None:
        """Apply ``op`` to the entity, ignoring its result and its error (see :func:`durable.signal_entity`)."""
        self._apply_entity(name, key, op, arg, SIGNAL_TIMEOUT, op_id)

    def get_entity_state(self, name: Any, key: Any) -> Any:
        """The entity's state now: its initial state if no operation was ever applied to the key."""
        entity = self.engine.registry.get_entity(name)
        found = self.engine.store.get_entity(entity.name, check_key(entity.name, key))
        return entity.initial_state() if found is None else found.state

    def entity_ops(self, name: Any, key: Any, limit: int = 100) -> list[EntityOpRecord]:
        """The entity's newest applied operations (at most ``limit``), newest first."""
        entity = self.engine.registry.get_entity(name)
        limit = check_limit(limit, 100_000)
        return self.engine.store.entity_ops(entity.name, check_key(entity.name, key), limit)

    def _apply_entity(
        self, name: Any, key: Any, op: str, arg: Any, timeout: float | None, op_id: str | None
    ) -> EntityApplied:
        engine = self.engine
        entity = engine.registry.get_entity(name)
        call = entity_call(
            entity,
            key,
            op,
            arg,
            op_id=check_id(op_id, "op_id") if op_id is not None else uuid.uuid4().hex,
            timeout=timeout,
            max_bytes=engine.settings.max_payload_bytes,
        )
        return engine.store.apply_entity_op(call, engine.clock.now())
