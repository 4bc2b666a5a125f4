"""The runtime API on schedules: ``durable.create_schedule``, ``pause_schedule``, ``backfill_schedule``...

Every function validates its arguments first and raises a
:class:`~durable.DurableError` subclass on bad input (nothing is written
then): :class:`~durable.InvalidInput` for a bad spec, key or range,
:class:`~durable.ScheduleNotFound` for an unknown key,
:class:`~durable.ScheduleExists` when creating a key that exists,
:class:`~durable.WorkflowNotFound` for an unknown workflow. Writes are
compare-and-set on the row's revision (re-read and retried when a sweep or
another operator moved the row on), so they are safe beside running sweeps.
Runs a call starts are dispatched once the caller's transaction commits.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from durable import runtime
from durable.engine.core import Engine
from durable.exceptions import InvalidInput, InvalidRunState, ScheduleExists, ScheduleNotFound
from durable.schedules.info import ScheduleInfo
from durable.schedules.plan import SchedulePlan, ScheduleRecord, new_row, plan_change, plan_runs
from durable.schedules.spec import MAX_WINDOWS, Schedule, ScheduleOrigin, parse_instant
from durable.schedules.sweep import make_run
from durable.schedules.sync import sync_schedules as sync
from durable.schedules.windows import between, run_id
from durable.validation import check_name

_RETRIES = 5


def _engine() -> Engine:
    return runtime.get_engine()


def _key(key: Any) -> str:
    name = check_name(key, "schedule key")
    if "@" in name:
        raise InvalidInput(f"schedule key must not contain '@' (it separates the key in run ids), got {key!r}")
    return name


def _record(engine: Engine, key: Any) -> ScheduleRecord:
    rec = engine.store.get_schedule(_key(key))
    if rec is None:
        raise ScheduleNotFound(f"no schedule with key {key!r}")
    return rec


def _dispatch(engine: Engine, run_ids: tuple[str, ...]) -> None:
    if run_ids:

        def dispatch() -> None:
            for rid in run_ids:
                engine.transport.dispatch_turn(rid)

        transaction.on_commit(dispatch)


def _spec(schedule: Schedule | None, fields: dict[str, Any]) -> Schedule:
    if schedule is not None and fields:
        raise InvalidInput("pass a durable.Schedule or its fields as keywords, not both")
    if schedule is not None:
        if not isinstance(schedule, Schedule):
            raise InvalidInput(f"schedule must be a durable.Schedule, got {schedule!r}")
        return schedule
    try:
        return Schedule(**fields)
    except TypeError as exc:
        raise InvalidInput(f"invalid schedule fields: {exc}") from None


def create_schedule(key: str, workflow: Any, schedule: Schedule | None = None, **fields: Any) -> ScheduleInfo:
    """Create a runtime schedule ``key`` starting ``workflow`` (a decorated function or a name).

    The spec is a :class:`~durable.Schedule` or its fields as keywords
    (``every="15m"``, ``cron="0 2 * * *"``, ``timezone=...``). Its first window
    is the first at or after now. Raises ScheduleExists if the key is taken.
    """
    engine = _engine()
    key = _key(key)
    wf = engine.registry.resolve_workflow(workflow)
    spec = _spec(schedule, fields)
    now = engine.clock.now()
    if not engine.store.create_schedule(new_row(key, wf.name, spec, ScheduleOrigin.RUNTIME, now, code=False)):
        raise ScheduleExists(f"a schedule with key {key!r} exists; change it with update_schedule")
    return get_schedule(key)


def _apply(engine: Engine, key: str, make: Any) -> ScheduleInfo:
    """Re-read, plan with ``make(rec)`` and apply until the revision matches."""
    for _ in range(_RETRIES):
        plan: SchedulePlan = make(_record(engine, key))
        result = engine.store.apply_schedule(plan, engine.clock.now())
        if result.applied:
            _dispatch(engine, (*result.woken, *result.created))
            return get_schedule(key)
    raise InvalidRunState(f"schedule {key!r} kept changing under this write; try again")


def update_schedule(key: str, *, workflow: Any = None, **changes: Any) -> ScheduleInfo:
    """Change fields of a schedule's spec (any :class:`~durable.Schedule` field but ``paused``), or its workflow.

    Its windows are recomputed from the pending window. On a code schedule the
    change stays across deploys until the code changes that same field.
    """
    engine = _engine()
    if "paused" in changes:
        raise InvalidInput("use pause_schedule / resume_schedule to change paused")
    name = engine.registry.resolve_workflow(workflow).name if workflow is not None else None
    if not changes and name is None:
        raise InvalidInput("update_schedule needs at least one field to change")
    now = engine.clock.now()

    def make(rec: ScheduleRecord) -> SchedulePlan:
        return plan_change(rec, now, spec=rec.schedule.changed(**changes) if changes else None, workflow=name)

    return _apply(engine, _key(key), make)


def pause_schedule(key: str) -> ScheduleInfo:
    """Stop starting windows until :func:`resume_schedule` (a deploy keeps the schedule paused)."""
    engine = _engine()
    now = engine.clock.now()
    return _apply(engine, _key(key), lambda rec: plan_change(rec, now, paused=True))


def resume_schedule(key: str) -> ScheduleInfo:
    """Start windows again, from the first at or after now (windows passed while paused are not run)."""
    engine = _engine()
    now = engine.clock.now()
    return _apply(engine, _key(key), lambda rec: plan_change(rec, now, paused=False))


def trigger_schedule(key: str) -> str:
    """Start one run now, outside the windows (whatever the overlap policy); returns its run id.

    Its ``ctx.schedule_window`` is the instant of the trigger; it becomes the
    schedule's last run.
    """
    engine = _engine()
    now = engine.clock.now()
    rid = f"{_key(key)}@trigger-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"

    def make(rec: ScheduleRecord) -> SchedulePlan:
        fields = make_run(engine, rec, now, rid, now)
        if fields is None:
            raise InvalidRunState(f"schedule {key!r}: workflow {rec.workflow!r} cannot start in this process")
        return plan_runs(rec, now, [fields], last=True)

    _apply(engine, _key(key), make)
    return rid


def backfill_schedule(key: str, start: Any, end: Any) -> list[str]:
    """Start every window in ``[start, end]`` (at most 1,000), each exactly once; their run ids.

    A window that already started (by the schedule, or an earlier backfill)
    keeps its run and starts nothing new. The overlap policy does not apply.
    """
    engine = _engine()
    start_at, end_at = parse_instant(start, "start"), parse_instant(end, "end")
    if start_at is None or end_at is None or end_at < start_at:
        raise InvalidInput("backfill needs start and end, with start not after end")
    now = engine.clock.now()
    rec = _record(engine, key)
    windows = between(rec.schedule, start_at, end_at, MAX_WINDOWS)
    if len(windows) > MAX_WINDOWS:
        raise InvalidInput(
            f"backfill of {key!r} from {start_at.isoformat()} to {end_at.isoformat()} covers more than "
            f"{MAX_WINDOWS} windows; split it into smaller ranges"
        )

    def make(rec: ScheduleRecord) -> SchedulePlan:
        runs = [make_run(engine, rec, now, run_id(rec.key, w), w) for w in windows]
        if any(fields is None for fields in runs):
            raise InvalidRunState(f"schedule {key!r}: workflow {rec.workflow!r} cannot start in this process")
        return plan_runs(rec, now, [f for f in runs if f is not None], last=False)

    _apply(engine, rec.key, make)
    return [run_id(rec.key, w) for w in windows]


def delete_schedule(key: str) -> None:
    """Delete a schedule (its runs stay). A code schedule comes back at the next sync while the code declares it."""
    engine = _engine()
    if not engine.store.delete_schedule(_key(key)):
        raise ScheduleNotFound(f"no schedule with key {key!r}")


def get_schedule(key: str) -> ScheduleInfo:
    """The schedule ``key`` (ScheduleNotFound if none)."""
    return ScheduleInfo.from_record(_record(_engine(), key))


def list_schedules() -> list[ScheduleInfo]:
    """Every schedule, by key."""
    return [ScheduleInfo.from_record(rec) for rec in _engine().store.list_schedules()]


def sync_schedules() -> None:
    """Write the code's schedules to the database now (workers and sweeps do it on start-up)."""
    sync(_engine())
