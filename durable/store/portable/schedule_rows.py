"""Schedules: their rows, and the sweep that fires due windows, as the portable store writes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import OuterRef, Subquery

from durable.models import Run
from durable.models import Schedule as ScheduleRow
from durable.schedules.plan import ScheduleApplied, SchedulePlan, ScheduleRecord
from durable.store.portable.run_rows import RunRows

_FIELDS = list(ScheduleRecord.__dataclass_fields__)

Decide = Callable[[ScheduleRecord, str | None], SchedulePlan | None]


def schedule_record(row: ScheduleRow) -> ScheduleRecord:
    return ScheduleRecord(**{name: getattr(row, name) for name in _FIELDS})


class ScheduleRows(RunRows):
    """Schedule rows; a plan's runs are inserted and cancelled as :class:`RunRows` does."""

    def create_schedule(self, fields: dict[str, Any]) -> bool:
        """Insert the schedule unless its key exists; True if inserted."""
        with transaction.atomic():
            if ScheduleRow.objects.filter(key=fields["key"]).exists():
                return False
            try:
                with transaction.atomic():
                    ScheduleRow.objects.create(**fields)
            except Exception:
                # A racing insert of the same key won: the schedule exists, as asked.
                if ScheduleRow.objects.filter(key=fields["key"]).exists():
                    return False
                raise
        return True

    def get_schedule(self, key: str) -> ScheduleRecord | None:
        row = ScheduleRow.objects.filter(key=key).first()
        return schedule_record(row) if row is not None else None

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by key."""
        return [schedule_record(row) for row in ScheduleRow.objects.order_by("key")]

    def delete_schedule(self, key: str) -> bool:
        return bool(ScheduleRow.objects.filter(key=key).delete()[0])

    def apply_schedule(self, plan: SchedulePlan, now: datetime) -> ScheduleApplied:
        """Execute ``plan`` in one transaction: the row's columns under its revision, then cancels and inserts."""
        with transaction.atomic():
            return self._apply_schedule(plan, now)

    def _apply_schedule(self, plan: SchedulePlan, now: datetime) -> ScheduleApplied:
        matched = ScheduleRow.objects.filter(key=plan.key, revision=plan.revision).update(
            revision=plan.revision + 1, **plan.changes
        )
        if not matched:
            return ScheduleApplied(plan.key, False)
        woken: list[str] = []
        cancelled: list[str] = []
        for run_id in plan.cancel:
            if Run.objects.filter(id=run_id).exists():
                done = self.cancel(run_id, now)
                woken += done.woken
                cancelled += done.cancelled
        created = [fields["id"] for fields in plan.runs if self.create_run(fields)]
        return ScheduleApplied(plan.key, True, tuple(created), tuple(woken), tuple(cancelled))

    def fire_schedules(self, now: datetime, limit: int, decide: Decide) -> list[ScheduleApplied]:
        """Plan (``decide``) and apply the due rows of a page, under their row locks.

        Any number of sweepers may run this at once: on a database with row
        locks each takes rows the others do not hold (``SKIP LOCKED``), and
        every write is compare-and-set on the row's revision anyway.
        """
        last_status = Subquery(Run.objects.filter(id=OuterRef("last_run_id")).values("status")[:1])
        with transaction.atomic():
            rows = ScheduleRow.objects.filter(paused=False, due_at__lte=now).order_by("due_at")
            if connection.features.has_select_for_update_skip_locked:
                rows = rows.select_for_update(skip_locked=True, of=("self",))
            page = list(rows.annotate(last_status=last_status)[:limit])
            plans = [decide(schedule_record(row), row.last_status) for row in page]
            results = self._apply_page([plan for plan in plans if plan is not None], now)
        return results

    def _apply_page(self, plans: list[SchedulePlan], now: datetime) -> list[ScheduleApplied]:
        """The plans of a locked page, one after another (the PostgreSQL store writes them together)."""
        return [self._apply_schedule(plan, now) for plan in plans]
