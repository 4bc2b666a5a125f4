"""Entities: one operation applied under the entity's row lock, its state and log row together (ORM).

Executes :class:`~durable.engine.plan_entities.EntityCall` as
:mod:`durable.engine.plan_entities` describes: the entity's row is created if
absent (insert or ignore, so racing first callers make one row) and locked
(``SELECT ... FOR UPDATE``; SQLite has one writer at a time, taken at
``BEGIN IMMEDIATE``), then the op log is read for the op id, then the new
state, the op's row and the pruning of old rows are written in the same
transaction. The lock is the only ordering: operations of one key never
interleave, operations of different keys lock different rows (in parallel
where the database has row locks).

Waiting for the lock is bounded by the call's ``timeout``: SQLite's busy
timeout for the transaction's ``BEGIN`` here, PostgreSQL's ``lock_timeout``
in :mod:`durable.store.postgres.entity_rows`. Past it,
:class:`~durable.EntityTimeout` and nothing is written.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from django.db import OperationalError, connection, transaction

from durable import sqlite
from durable.engine.plan_entities import (
    EntityApplied,
    EntityCall,
    EntityOpRecord,
    EntityRecord,
    op_record,
    plan_entity_op,
)
from durable.exceptions import EntityTimeout
from durable.models import Entity, EntityOp
from durable.store.portable.shared import StoreBase

# The columns of an op log row that its record names alike (besides the entity and created_at).
OP_COLUMNS = ("op_id", "seq", "op", "arg", "status", "result", "error")


class EntityRows(StoreBase):
    def apply_entity_op(self, call: EntityCall, now: datetime) -> EntityApplied:
        """Apply ``call`` once (see :mod:`durable.engine.plan_entities`); a logged op id is answered from its row."""
        try:
            with self._entity_wait(call.timeout), transaction.atomic():
                entity = self._lock_entity(call, now)
                return self._apply_locked(entity, call, now)
        except OperationalError as exc:
            if self._lock_timed_out(exc):
                raise EntityTimeout(call.name, call.key, call.timeout) from None
            raise

    def get_entity(self, name: str, key: str) -> EntityRecord | None:
        """The entity's row, or None if no operation was ever applied to ``(name, key)``."""
        row = Entity.objects.filter(name=name, key=key).first()
        return None if row is None else _entity_record(row)

    def entity_ops(self, name: str, key: str, limit: int) -> list[EntityOpRecord]:
        """The entity's newest ``limit`` log rows, newest first (what its history still holds)."""
        rows = EntityOp.objects.filter(entity__name=name, entity__key=key).order_by("-seq")[:limit]
        return [_op_record(name, key, row) for row in rows]

    # -- hooks of the PostgreSQL store --------------------------------------------------
    def _entity_wait(self, timeout: float | None) -> AbstractContextManager[None]:
        """Bound the wait for the lock around the transaction (SQLite: its busy timeout)."""
        return sqlite.busy_timeout(connection, timeout)

    def _lock_entity(self, call: EntityCall, now: datetime) -> Entity:
        """The entity's row, created from ``call.initial`` if absent, locked until the transaction ends.

        The lock is tried first (an existing entity costs no insert); an
        absent row is inserted or ignored (a racing first caller's insert
        wins), then locked.
        """
        found = list(Entity.objects.select_for_update().filter(name=call.name, key=call.key)[:1])
        if found:
            return found[0]
        Entity.objects.bulk_create(
            [Entity(name=call.name, key=call.key, state=call.initial, created_at=now, updated_at=now)],
            ignore_conflicts=True,
        )
        return Entity.objects.select_for_update().get(name=call.name, key=call.key)

    def _lock_timed_out(self, exc: OperationalError) -> bool:
        return sqlite.is_busy(exc)

    # -- the write ------------------------------------------------------------------------
    @staticmethod
    def _apply_locked(entity: Entity, call: EntityCall, now: datetime) -> EntityApplied:
        found = EntityOp.objects.filter(entity=entity, op_id=call.op_id).first()
        if found is not None:
            return EntityApplied(_op_record(call.name, call.key, found), entity.state, replayed=True)
        plan = plan_entity_op(call, entity.state, entity.ops)
        Entity.objects.filter(pk=entity.pk).update(state=plan.state, ops=plan.seq, updated_at=now)
        record = op_record(call, plan, now)
        columns = {f: getattr(record, f) for f in OP_COLUMNS}
        EntityOp.objects.bulk_create([EntityOp(entity=entity, created_at=now, **columns)])
        if plan.prune_through:
            EntityOp.objects.filter(entity=entity, seq__lte=plan.prune_through).delete()
        return EntityApplied(record, plan.state)


def _entity_record(row: Entity) -> EntityRecord:
    return EntityRecord(row.name, row.key, row.state, row.ops, row.created_at, row.updated_at)


def _op_record(name: str, key: str, row: EntityOp) -> EntityOpRecord:
    columns: dict[str, Any] = {f: getattr(row, f) for f in OP_COLUMNS}
    return EntityOpRecord(name=name, key=key, created_at=row.created_at, **columns)
