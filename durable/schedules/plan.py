"""What each schedule write changes, decided once (pure, like :mod:`durable.engine.plan`).

A schedule row is written only through a :class:`SchedulePlan`: the columns
to set, the revision they are written under (compare-and-set: a plan made
from a row another process changed meanwhile writes nothing), the runs to
insert (idempotent on their id) and the runs to cancel. A store executes a
plan in one transaction and decides nothing.

Exactly once per window follows from two facts: a window's run id is a
function of the schedule key and the window instant
(:func:`durable.schedules.windows.run_id`), and inserting a run whose id
exists does nothing. Two sweepers that plan the same window both insert the
same run, so it starts once; the revision check keeps the row's own columns
(counters, the buffered window) from being written twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from durable.engine.vocab import ACTIVE
from durable.schedules.spec import Overlap, Schedule
from durable.schedules.windows import first_window, jitter_delay, last_windows, next_window, run_id

# Windows a catch-up looks at beyond catch_up, for trailing windows still inside their jitter.
_JITTER_SLACK = 8
# How long a schedule whose workflow this process does not know waits before it is looked at again.
UNKNOWN_RETRY = timedelta(seconds=60)

# The columns every firing plan sets (a store may write a page of such plans as one statement).
FIRE_COLUMNS: tuple[str, ...] = (
    "next_window",
    "due_at",
    "buffered",
    "last_run_id",
    "last_window",
    "skipped",
    "updated_at",
)

# Builds the fields of a new run: (run id, window or None for a trigger) -> fields, or None to refuse.
MakeRun = Callable[[str, datetime | None], dict[str, Any] | None]


@dataclass(frozen=True)
class ScheduleRecord:
    """A schedule row as the stores return it."""

    key: str
    workflow: str
    spec: dict[str, Any]
    paused: bool
    origin: str
    code_spec: dict[str, Any] | None
    next_window: datetime | None
    due_at: datetime | None
    buffered: datetime | None
    last_run_id: str | None
    last_window: datetime | None
    skipped: int
    revision: int
    created_at: datetime
    updated_at: datetime

    @property
    def schedule(self) -> Schedule:
        return Schedule.from_json(self.spec, paused=self.paused)


@dataclass(frozen=True)
class SchedulePlan:
    """Set ``changes`` on row ``key`` if its revision is still ``revision``; then cancel and insert runs."""

    key: str
    revision: int
    changes: dict[str, Any]
    runs: tuple[dict[str, Any], ...] = ()
    cancel: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScheduleApplied:
    """What a plan did: ``applied`` False means nothing was written (the row moved on or is gone)."""

    key: str
    applied: bool
    created: tuple[str, ...] = field(default_factory=tuple)
    woken: tuple[str, ...] = field(default_factory=tuple)
    cancelled: tuple[str, ...] = field(default_factory=tuple)  # by overlap cancel_other, to announce


def due_at(
    key: str, spec: Schedule, window: datetime | None, buffered: datetime | None, now: datetime
) -> datetime | None:
    """When the sweep next looks at the row: the window plus its jitter, or now while a window is buffered."""
    due = window + jitter_delay(key, window, spec.jitter) if window is not None else None
    if buffered is not None:
        due = now if due is None else min(due, now)
    return due


def new_row(key: str, workflow: str, spec: Schedule, origin: str, now: datetime, *, code: bool) -> dict[str, Any]:
    """The columns of a new schedule row; its first window is the first at or after ``now``."""
    window = first_window(spec, now)
    return {
        "key": key,
        "workflow": workflow,
        "spec": spec.to_json(),
        "paused": spec.paused,
        "origin": origin,
        "code_spec": {"workflow": workflow, **spec.to_json()} if code else None,
        "next_window": window,
        "due_at": due_at(key, spec, window, None, now),
        "buffered": None,
        "last_run_id": None,
        "last_window": None,
        "skipped": 0,
        "revision": 1,
        "created_at": now,
        "updated_at": now,
    }


def plan_change(
    rec: ScheduleRecord, now: datetime, *, spec: Schedule | None = None, workflow: str | None = None, **extra: Any
) -> SchedulePlan:
    """A new spec, a new paused state, or other columns, written under the row's revision.

    A new spec takes its windows from the row's pending window (or ``now``,
    whichever is earlier); a resume from ``now``: windows that passed while the
    schedule was paused are not run.
    """
    changes: dict[str, Any] = {"updated_at": now, **extra}
    if workflow is not None:
        changes["workflow"] = workflow
    resume = extra.get("paused") is False and rec.paused
    if spec is not None or resume:
        spec = spec or rec.schedule
        since = now if resume or rec.next_window is None else min(rec.next_window, now)
        window = first_window(spec, since)
        changes.update(spec=spec.to_json(), next_window=window, due_at=due_at(rec.key, spec, window, rec.buffered, now))
    return SchedulePlan(rec.key, rec.revision, changes)


def plan_runs(rec: ScheduleRecord, now: datetime, runs: list[dict[str, Any]], *, last: bool) -> SchedulePlan:
    """Insert ``runs`` outside the windows (a trigger, a backfill); ``last``: the final one becomes the last run."""
    changes: dict[str, Any] = {"updated_at": now}
    if last and runs:
        changes["last_run_id"] = runs[-1]["id"]
    return SchedulePlan(rec.key, rec.revision, changes, runs=tuple(runs))


def _due_windows(rec: ScheduleRecord, spec: Schedule, now: datetime) -> tuple[list[datetime], datetime | None]:
    """The windows to act on now (at most ``catch_up``, ascending) and the next window after them."""
    if rec.next_window is None or rec.next_window > now:
        return [], rec.next_window
    cands = last_windows(spec, now, spec.catch_up + _JITTER_SLACK, not_before=rec.next_window)
    due = 0
    while due < len(cands) and cands[due] + jitter_delay(rec.key, cands[due], spec.jitter) <= now:
        due += 1
    following = cands[due] if due < len(cands) else next_window(spec, cands[-1] if cands else now)
    return cands[:due][-spec.catch_up :], following


@dataclass
class _Firing:
    """A plan being built: the runs started so far and the row's new columns."""

    last_run_id: str | None
    active: bool
    buffered: datetime | None
    skipped: int
    runs: list[dict[str, Any]] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)
    last_window: datetime | None = None

    def start(self, fields: dict[str, Any], window: datetime) -> None:
        self.runs.append(fields)
        self.last_run_id = fields["id"]
        self.last_window = window
        self.active = True


def _apply_overlap(f: _Firing, overlap: Overlap, window: datetime, fields: dict[str, Any]) -> None:
    """Act on one due window under the overlap policy."""
    if overlap == Overlap.ALLOW or not f.active:
        f.start(fields, window)
    elif overlap == Overlap.SKIP:
        f.skipped += 1
    elif overlap == Overlap.BUFFER_ONE:
        if f.buffered is None:
            f.buffered = window
        else:
            f.skipped += 1
    else:  # CANCEL_OTHER
        if f.runs and f.runs[-1]["id"] == f.last_run_id:
            f.runs.pop()  # started in this same plan: never started at all
            f.skipped += 1
        elif f.last_run_id is not None:
            f.cancel.append(f.last_run_id)
        f.active = False
        f.start(fields, window)


def plan_fire(rec: ScheduleRecord, last_status: str | None, now: datetime, make_run: MakeRun) -> SchedulePlan | None:
    """The sweep's plan for a due row: start (or skip, buffer, cancel for) its due windows.

    ``last_status``: the status of the schedule's last run (None: none, or
    gone). Returns None when there is nothing to write.
    """
    spec = rec.schedule
    f = _Firing(rec.last_run_id, last_status in ACTIVE, rec.buffered, rec.skipped, last_window=rec.last_window)
    if f.buffered is not None and not f.active:
        fields = make_run(run_id(rec.key, f.buffered), f.buffered)
        if fields is None:
            return _retry_later(rec, now)
        window, f.buffered = f.buffered, None
        f.start(fields, window)
    windows, following = _due_windows(rec, spec, now)
    for window in windows:
        fields = make_run(run_id(rec.key, window), window)
        if fields is None:
            return _retry_later(rec, now)
        _apply_overlap(f, spec.overlap, window, fields)
    new_due = due_at(rec.key, spec, following, f.buffered, now)
    if not windows and f.buffered == rec.buffered and not f.runs:
        return None
    values = (following, new_due, f.buffered, f.last_run_id, f.last_window, f.skipped, now)
    changes = dict(zip(FIRE_COLUMNS, values, strict=True))
    return SchedulePlan(rec.key, rec.revision, changes, runs=tuple(f.runs), cancel=tuple(f.cancel))


def _retry_later(rec: ScheduleRecord, now: datetime) -> SchedulePlan:
    """The workflow is unknown here (or refused the input): look again later, windows untouched."""
    return SchedulePlan(rec.key, rec.revision, {"due_at": now + UNKNOWN_RETRY, "updated_at": now})
