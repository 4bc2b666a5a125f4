"""Singleton keys in memory: admission of new runs, hand-over of freed slots, keys with waiting runs.

The plans of :mod:`durable.engine.plan_singletons`, as the database stores
execute them; the store's one lock stands for the key's slot row lock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durable.engine.plan_singletons import (
    KeyState,
    admitted_columns,
    plan_admission,
    plan_hand_over,
    waiting_reason,
)
from durable.engine.ports import Admitted
from durable.engine.vocab import SLOT_HOLDING, RunStatus
from durable.store.memory.base import MemoryBase, atomically, locked
from durable.store.memory.tables import Row, new_run

NOT_CREATED = Admitted(created=False)


class SingletonsPart(MemoryBase):
    @atomically
    def admit_run(self, fields: dict[str, Any], max_queue_depth: int | None, now: datetime) -> Admitted:
        """Insert a new run of a singleton workflow, ``pending`` or ``queued`` (see the database store)."""
        return self._admit_new(fields, max_queue_depth, now)

    def _admit_new(self, fields: dict[str, Any], max_queue_depth: int | None, now: datetime) -> Admitted:
        if fields["id"] in self.tables.runs:
            return NOT_CREATED
        workflow, key, limit = fields["workflow"], fields["singleton_key"], fields["singleton_limit"]
        slot = self.tables.slots.get((workflow, key))
        plan = plan_admission(workflow, key, limit, max_queue_depth, self._key_state(workflow, key, slot))
        admitted = self._admit_head(workflow, key, plan.promote, now)
        if slot is None:
            self.tables.put(self.tables.slots, (workflow, key), {"limit": limit, "tail": plan.seq})
        else:
            self.tables.set(slot, limit=limit, tail=plan.seq)
        row = {**fields, "status": plan.status, "singleton_seq": plan.seq}
        if plan.reason is not None:
            row["error"] = plan.reason
        self.tables.put(self.tables.runs, fields["id"], new_run(row, self._clock.now()))
        return Admitted(True, plan.status, tuple(admitted))

    @atomically
    def hand_over(self, workflow: str, key: str, now: datetime) -> list[str]:
        """Admit the oldest waiting runs of ``key`` into its free slots; return them (to dispatch)."""
        slot = self.tables.slots.get((workflow, key))
        if slot is None:
            return []
        state = self._key_state(workflow, key, slot)
        return self._admit_head(workflow, key, plan_hand_over(slot["limit"], state.holders, state.waiting), now)

    @locked
    def waiting_keys(self, limit: int) -> list[tuple[str, str]]:
        """Keys with runs waiting for a slot (at most ``limit``), for the admission sweep."""
        keys = {(row["workflow"], row["singleton_key"]) for row in self._queued()}
        return sorted(keys)[:limit]

    def _hand_over_runs(self, run_ids: list[str], now: datetime) -> list[str]:
        """Hand over the slots the singleton runs among ``run_ids`` freed (they just left a holding status)."""
        keys = {(row["workflow"], row["singleton_key"]) for row in self._runs_with(run_ids, list(RunStatus))}
        admitted: list[str] = []
        for workflow, key in sorted(k for k in keys if k[1] is not None):
            admitted += self.hand_over(workflow, key, now)
        return admitted

    def _readmit(self, row: Row, now: datetime) -> None:
        """A requeued singleton run waits for its key again, behind the runs already waiting."""
        workflow, key = row["workflow"], row["singleton_key"]
        if key is None:
            return
        slot = self.tables.slots.get((workflow, key))
        if slot is None:
            slot = {"limit": row["singleton_limit"], "tail": 0}
            self.tables.put(self.tables.slots, (workflow, key), slot)
        seq = slot["tail"] + 1
        self.tables.set(
            row, status=RunStatus.QUEUED, singleton_seq=seq, error=waiting_reason(workflow, key, slot["limit"])
        )
        self.tables.set(slot, tail=seq)
        state = self._key_state(workflow, key, slot)
        self._admit_head(workflow, key, plan_hand_over(slot["limit"], state.holders, state.waiting), now)

    def _queued(self, workflow: str | None = None, key: str | None = None) -> list[Row]:
        rows = [row for row in self.tables.runs.values() if row["status"] == RunStatus.QUEUED]
        if workflow is not None:
            rows = [row for row in rows if (row["workflow"], row["singleton_key"]) == (workflow, key)]
        return rows

    def _key_state(self, workflow: str, key: str, slot: Row | None) -> KeyState:
        holders = sum(
            1
            for row in self.tables.runs.values()
            if row["singleton_key"] == key and row["workflow"] == workflow and row["status"] in SLOT_HOLDING
        )
        return KeyState(holders, len(self._queued(workflow, key)), slot["tail"] if slot is not None else 0)

    def _admit_head(self, workflow: str, key: str, count: int, now: datetime) -> list[str]:
        if count <= 0:
            return []
        head = sorted(self._queued(workflow, key), key=lambda row: row["singleton_seq"])[:count]
        for row in head:
            self.tables.set(row, **admitted_columns(now))
        return [row["id"] for row in head]
