"""Code schedules onto their rows: what a deploy changes, and what an operator's change keeps.

Ownership, field by field: a row remembers what the code declared at the last
sync (``code_spec``). A deploy writes only the fields whose declaration
changed since then; every other field keeps its current value, including one
an operator changed with ``update_schedule``. ``paused`` belongs to the
operator: ``Schedule(paused=True)`` in code only decides how a new schedule
starts, and no deploy pauses or resumes an existing one. A code schedule that
the code no longer declares is deleted by the sync of a process that still
registers its workflow (that process knows the workflow's current
declaration); one whose workflow is gone from the code is left alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durable.engine.core import Engine
from durable.schedules.plan import ScheduleRecord, new_row, plan_change
from durable.schedules.spec import Schedule, ScheduleOrigin

_MISSING = object()


def declared(workflow: str, spec: Schedule) -> dict[str, Any]:
    """What the code declares for one schedule, as ``code_spec`` stores it."""
    return {"workflow": workflow, **spec.to_json()}


def merge(rec: ScheduleRecord, code: dict[str, Any]) -> dict[str, Any]:
    """The row's fields after a deploy: the code's value where the declaration changed, else the row's."""
    before = rec.code_spec or {}
    current = {"workflow": rec.workflow, **rec.spec}
    return {name: value if before.get(name, _MISSING) != value else current.get(name) for name, value in code.items()}


def _sync_one(engine: Engine, key: str, workflow: str, spec: Schedule, now: datetime) -> None:
    store = engine.store
    code = declared(workflow, spec)
    for _ in range(3):  # a racing writer moved the row on: read it again
        rec = store.get_schedule(key)
        if rec is None:
            if store.create_schedule(new_row(key, workflow, spec, ScheduleOrigin.CODE, now, code=True)):
                return
            continue
        if rec.code_spec == code and rec.origin == ScheduleOrigin.CODE:
            return
        merged = merge(rec, code)
        name = merged.pop("workflow")
        changed = Schedule.from_json(merged)
        timing = changed.to_json() != rec.spec
        plan = plan_change(
            rec,
            now,
            spec=changed if timing else None,
            workflow=name,
            code_spec=code,
            origin=ScheduleOrigin.CODE,
        )
        if store.apply_schedule(plan, now).applied:
            return


def sync_schedules(engine: Engine) -> None:
    """Write the registry's code schedules to the store (idempotent; see the module docstring)."""
    revision = engine.registry.schedules_revision
    now = engine.clock.now()
    wanted = engine.registry.schedules()
    for key, (workflow, spec) in sorted(wanted.items()):
        _sync_one(engine, key, workflow, spec, now)
    known = {wf.name for wf in engine.registry.workflows()}
    for rec in engine.store.list_schedules():
        if rec.origin == ScheduleOrigin.CODE and rec.key not in wanted and rec.workflow in known:
            engine.store.delete_schedule(rec.key)
    engine.stats.schedules_synced = revision


def ensure_synced(engine: Engine) -> None:
    """Sync once per engine, and again whenever the registry's code schedules change."""
    if engine.stats.schedules_synced != engine.registry.schedules_revision:
        sync_schedules(engine)
