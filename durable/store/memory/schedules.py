"""Schedules in memory: the same semantics as the portable store's, under the store's one lock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from durable.schedules.plan import ScheduleApplied, SchedulePlan, ScheduleRecord
from durable.store.memory.base import atomically, locked
from durable.store.memory.runs import RunsPart
from durable.store.memory.tables import Row, as_json

_FIELDS = list(ScheduleRecord.__dataclass_fields__)
_JSON = ("spec", "code_spec")

Decide = Callable[[ScheduleRecord, str | None], SchedulePlan | None]


def _record(row: Row) -> ScheduleRecord:
    return ScheduleRecord(**{name: as_json(row[name]) if name in _JSON else row[name] for name in _FIELDS})


class SchedulesPart(RunsPart):
    """Schedule rows; a plan's runs are inserted and cancelled as :class:`RunsPart` does."""

    @atomically
    def create_schedule(self, fields: dict[str, Any]) -> bool:
        """Insert the schedule unless its key exists; True if inserted."""
        if fields["key"] in self.tables.schedules:
            return False
        row = {name: as_json(fields[name]) if name in _JSON else fields[name] for name in _FIELDS}
        self.tables.put(self.tables.schedules, fields["key"], row)
        return True

    @locked
    def get_schedule(self, key: str) -> ScheduleRecord | None:
        row = self.tables.schedules.get(key)
        return _record(row) if row is not None else None

    @locked
    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by key."""
        return [_record(self.tables.schedules[key]) for key in sorted(self.tables.schedules)]

    @atomically
    def delete_schedule(self, key: str) -> bool:
        if key not in self.tables.schedules:
            return False
        self.tables.drop(self.tables.schedules, key)
        return True

    @atomically
    def apply_schedule(self, plan: SchedulePlan, now: datetime) -> ScheduleApplied:
        """Execute ``plan`` atomically: the row's columns under its revision, then cancels and inserts."""
        row = self.tables.schedules.get(plan.key)
        if row is None or row["revision"] != plan.revision:
            return ScheduleApplied(plan.key, False)
        changes = {name: as_json(value) if name in _JSON else value for name, value in plan.changes.items()}
        self.tables.set(row, revision=plan.revision + 1, **changes)
        woken: list[str] = []
        cancelled: list[str] = []
        for run_id in plan.cancel:
            if run_id in self.tables.runs:
                done = self.cancel(run_id, now)
                woken += done.woken
                cancelled += done.cancelled
        created = self._insert_runs(list(plan.runs))
        return ScheduleApplied(plan.key, True, tuple(created), tuple(woken), tuple(cancelled))

    @atomically
    def fire_schedules(self, now: datetime, limit: int, decide: Decide) -> list[ScheduleApplied]:
        """Plan (``decide``) and apply the due rows of a page, oldest due first."""
        due = sorted(
            (row for row in self.tables.schedules.values() if not row["paused"] and row["due_at"] is not None),
            key=lambda row: row["due_at"],
        )
        results: list[ScheduleApplied] = []
        for row in [r for r in due if r["due_at"] <= now][:limit]:
            last = self.tables.runs.get(row["last_run_id"]) if row["last_run_id"] else None
            plan = decide(_record(row), last["status"] if last is not None else None)
            if plan is not None:
                results.append(self.apply_schedule(plan, now))
        return results
