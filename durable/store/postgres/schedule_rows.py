"""A page of schedule firings as two statements: the rows' compare-and-set update, then the runs' insert."""

from __future__ import annotations

from datetime import datetime

from durable.schedules.plan import FIRE_COLUMNS, ScheduleApplied, SchedulePlan
from durable.store.portable.schedule_rows import ScheduleRows
from durable.store.postgres.base import PostgresBase


class PostgresSchedules(PostgresBase, ScheduleRows):
    def _apply_page(self, plans: list[SchedulePlan], now: datetime) -> list[ScheduleApplied]:
        """Plain firings (no cancel, the usual columns) together; any other plan as the portable store does.

        Same guarantees as one plan at a time: a row whose revision moved on is
        not written and its runs are not inserted; runs are inserted only if
        their id is new. The page's rows are locked by ``fire_schedules``.
        """
        plain: list[SchedulePlan] = []
        others: list[SchedulePlan] = []
        for plan in plans:
            (plain if not plan.cancel and set(plan.changes) == set(FIRE_COLUMNS) else others).append(plan)
        results = [self._apply_schedule(plan, now) for plan in others]
        if not plain:
            return results
        written = {row[0] for row in self._execute(*self._statements.fire_schedules(plain))}
        runs = [fields for plan in plain if plan.key in written for fields in plan.runs]
        created = {row[0] for row in self._execute(*self._statements.insert_runs(runs))} if runs else set()
        for plan in plain:
            if plan.key not in written:
                results.append(ScheduleApplied(plan.key, False))
                continue
            ids = tuple(fields["id"] for fields in plan.runs if fields["id"] in created)
            results.append(ScheduleApplied(plan.key, True, ids))
        return results
