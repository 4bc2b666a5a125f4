"""Entities in memory: the plan of :mod:`durable.engine.plan_entities` under the store's one lock.

The lock stands for the entity's row lock (it serialises every key, where a
database serialises one key at a time); a call's ``timeout`` bounds the wait
for it. The state, the op's log row and the pruning are one atomic block.
"""

from __future__ import annotations

from datetime import datetime

from durable.engine.plan_entities import (
    EntityApplied,
    EntityCall,
    EntityOpRecord,
    EntityRecord,
    op_record,
    plan_entity_op,
)
from durable.exceptions import EntityTimeout
from durable.store.memory.base import MemoryBase, locked
from durable.store.memory.tables import Row, as_json


class EntitiesPart(MemoryBase):
    def apply_entity_op(self, call: EntityCall, now: datetime) -> EntityApplied:
        """Apply ``call`` once (see :mod:`durable.engine.plan_entities`); a logged op id is answered from its row."""
        if not self._lock.acquire(timeout=-1 if call.timeout is None else call.timeout):
            raise EntityTimeout(call.name, call.key, call.timeout)
        try:
            with self.atomic():
                return self._apply_entity(call, now)
        finally:
            self._lock.release()

    @locked
    def get_entity(self, name: str, key: str) -> EntityRecord | None:
        """The entity's row, or None if no operation was ever applied to ``(name, key)``."""
        row = self.tables.entities.get((name, key))
        if row is None:
            return None
        return EntityRecord(name, key, as_json(row["state"]), row["ops"], row["created_at"], row["updated_at"])

    @locked
    def entity_ops(self, name: str, key: str, limit: int) -> list[EntityOpRecord]:
        """The entity's newest ``limit`` log rows, newest first."""
        row = self.tables.entities.get((name, key))
        if row is None:
            return []
        found: list[EntityOpRecord] = []
        seq = row["ops"]
        while seq > 0 and len(found) < limit and (name, key, seq) in self.tables.entity_ops:
            found.append(_record(self.tables.entity_ops[(name, key, seq)]))
            seq -= 1
        return found

    def _apply_entity(self, call: EntityCall, now: datetime) -> EntityApplied:
        tables, ident = self.tables, (call.name, call.key)
        entity = tables.entities.get(ident)
        if entity is None:
            entity = {"state": as_json(call.initial), "ops": 0, "created_at": now, "updated_at": now}
            tables.put(tables.entities, ident, entity)
        seen = tables.entity_op_ids.get((call.name, call.key, call.op_id))
        if seen is not None:
            logged = _record(tables.entity_ops[(call.name, call.key, seen)])
            return EntityApplied(logged, as_json(entity["state"]), replayed=True)
        plan = plan_entity_op(call, as_json(entity["state"]), entity["ops"])
        tables.set(entity, state=as_json(plan.state), ops=plan.seq, updated_at=now)
        record = op_record(call, plan, now)
        tables.put(tables.entity_ops, (call.name, call.key, plan.seq), _row(record))
        tables.put(tables.entity_op_ids, (call.name, call.key, call.op_id), plan.seq)
        seq = plan.prune_through
        while seq > 0 and (call.name, call.key, seq) in tables.entity_ops:
            old = tables.entity_ops[(call.name, call.key, seq)]
            tables.drop(tables.entity_op_ids, (call.name, call.key, old["op_id"]))
            tables.drop(tables.entity_ops, (call.name, call.key, seq))
            seq -= 1
        return EntityApplied(record, as_json(plan.state))


def _row(record: EntityOpRecord) -> Row:
    row: Row = dict(record.__dict__)
    for name in ("arg", "result", "error"):
        row[name] = as_json(row[name])
    return row


def _record(row: Row) -> EntityOpRecord:
    values = dict(row)
    for name in ("arg", "result", "error"):
        values[name] = as_json(values[name])
    return EntityOpRecord(**values)
