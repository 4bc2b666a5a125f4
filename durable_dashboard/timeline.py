"""The run detail page's data: a step timeline on a time axis, and what the run waits on.

Pure functions over model instances; the template draws each bar as a
positioned ``<div>`` (left/width in percent of the run's time span), so the
page needs no JavaScript.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from durable.display import RECONCILE, WAIT_KINDS, format_duration, wake_reason
from durable.engine.vocab import CALLBACK_TOKEN, EVENT_TOKEN, RUN_TOKEN, UNSETTLED, UPDATE_TOKEN, RunStatus
from durable.models import ACTIVE, Admission, Checkpoint, CheckpointKind, CheckpointStatus, Run
from durable.queues import step_wait_reason


def pretty(value: Any) -> str:
    """JSON indented for a ``<pre>`` block."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def without_tracebacks(value: Any) -> Any:
    """``value`` with every ``traceback`` key removed (they are shown apart, as text)."""
    if isinstance(value, dict):
        return {k: without_tracebacks(v) for k, v in value.items() if k != "traceback"}
    if isinstance(value, list):
        return [without_tracebacks(v) for v in value]
    return value


def tracebacks(value: Any, path: str = "error") -> list[tuple[str, str]]:
    """Every ``traceback`` string in an error record, outermost first, with where it was found."""
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        if isinstance(value.get("traceback"), str):
            found.append((path, value["traceback"]))
        for key, item in value.items():
            if key != "traceback":
                found += tracebacks(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += tracebacks(item, f"{path}[{i}]")
    return found


def human(delta: timedelta | None) -> str:
    """A duration as everywhere else in the admin and the commands (:func:`durable.display.format_duration`)."""
    return format_duration(delta)


def took(cp: Checkpoint, now: datetime) -> str:
    """How long a checkpoint's operation ran (so far, while it is open)."""
    if not cp.started_at:
        return ""
    end = cp.finished_at or (now if cp.status in UNSETTLED else None)
    return human(end - cp.started_at) if end else ""


@dataclass
class Segment:
    kind: str  # wait (queued), run, timer, retry
    left: float
    width: float
    title: str


@dataclass
class Row:
    seq: int
    name: str
    kind: str
    status: str
    attempts: int
    duration: str
    segments: list[Segment] = field(default_factory=list)
    markers: list[Segment] = field(default_factory=list)
    error: str = ""
    progress: str = ""


@dataclass
class Timeline:
    start: datetime
    end: datetime
    rows: list[Row]
    ticks: list[tuple[float, str]]


def build_timeline(run: Run, checkpoints: list[Checkpoint], now: datetime) -> Timeline:
    """Bars per checkpoint: queue wait (enqueued→started), run (started→finished), timers."""
    times = [run.created_at]
    for cp in checkpoints:
        times += [t for t in (cp.enqueued_at, cp.started_at, cp.finished_at, cp.heartbeat_at) if t]
        if cp.kind == CheckpointKind.SLEEP and cp.wake_at:
            times.append(cp.wake_at)
    start = min(times)
    end = max([*times, run.finished_at or now])
    span = max((end - start).total_seconds(), 0.001)

    def pos(t: datetime) -> float:
        return round(max(0.0, min(100.0, (t - start).total_seconds() * 100 / span)), 3)

    def seg(kind: str, a: datetime, b: datetime, title: str) -> Segment:
        left = pos(a)
        return Segment(kind, left, max(round(pos(b) - left, 3), 0.4), title)

    rows = []
    for cp in checkpoints:
        row = Row(cp.seq, cp.name, cp.kind, cp.status, cp.attempts, "")
        open_end = now if cp.status in UNSETTLED else (cp.finished_at or now)
        if cp.enqueued_at:
            queued = open_end if cp.status == CheckpointStatus.PENDING else cp.finished_at
            queued_until = cp.started_at or queued or open_end
            row.segments.append(
                seg("wait", cp.enqueued_at, queued_until, f"queued {human(queued_until - cp.enqueued_at)}")
            )
        if cp.kind == CheckpointKind.SLEEP and cp.wake_at:
            begin = cp.started_at or cp.finished_at or start
            row.segments.append(seg("timer", begin, cp.wake_at, f"timer due {cp.wake_at:%Y-%m-%d %H:%M:%S}"))
        elif cp.started_at:
            stop = cp.finished_at or open_end
            waits = cp.kind in WAIT_KINDS
            verb = "waited" if waits else "ran"
            row.segments.append(
                seg("await" if waits else "run", cp.started_at, stop, f"{verb} {human(stop - cp.started_at)}")
            )
            row.duration = human(stop - cp.started_at)
        elif cp.finished_at:
            row.segments.append(seg("run", cp.finished_at, cp.finished_at, "recorded"))
        if cp.retry_at and cp.status in UNSETTLED:
            row.markers.append(seg("retry", cp.retry_at, cp.retry_at, f"retry at {cp.retry_at:%H:%M:%S}"))
        if cp.heartbeat_at:
            row.markers.append(seg("heartbeat", cp.heartbeat_at, cp.heartbeat_at, "last heartbeat"))
        if cp.error:
            row.error = str(cp.error.get("message") if isinstance(cp.error, dict) else cp.error)[:500]
        if cp.progress is not None:
            row.progress = json.dumps(cp.progress, default=str)[:200]
        rows.append(row)
    ticks = [(i * 25.0, human(timedelta(seconds=span * i / 4))) for i in range(5)]
    return Timeline(start, end, rows, ticks)


# Waiter tokens other than plain signal names (see durable.models.SignalWaiter), and what each waits for.
_TOKENS: tuple[tuple[str, str], ...] = (
    (RUN_TOKEN, "run"),
    (EVENT_TOKEN, CheckpointKind.EVENT),
    (UPDATE_TOKEN, CheckpointKind.UPDATE),
    (CALLBACK_TOKEN, CheckpointKind.CALLBACK),
)


def masked(name: str) -> str:
    """A waiter's or buffered signal's name for display: a callback's token is a credential, never shown."""
    return CALLBACK_TOKEN + "…" if name.startswith(CALLBACK_TOKEN) else name


def _waited_for(token: str) -> tuple[str, str]:
    """(kind, what) of a waiter's token: another run, an event, an update, else a signal's name."""
    for prefix, kind in _TOKENS:
        if token.startswith(prefix):
            return kind, token[len(prefix) :]
    return CheckpointKind.SIGNAL, token


def waiting_on(
    run: Run, checkpoints: list[Checkpoint], waiters: list[Any], children: list[Run]
) -> list[dict[str, Any]]:
    """What an active run waits for now: signals, timers, steps, children, events."""
    if run.status not in ACTIVE:
        return []
    if run.status == RunStatus.QUEUED:
        what = f"{run.singleton_key} (at most {run.singleton_limit} at a time, queue position {run.singleton_seq})"
        return [{"kind": "singleton key", "what": what, "due": None, "seq": None}]
    items: list[dict[str, Any]] = []
    names = {cp.seq: cp.name for cp in checkpoints}
    for waiter in waiters:
        kind, what = _waited_for(waiter.name)
        if kind == CheckpointKind.CALLBACK:
            what = names.get(waiter.seq, "callback")  # its name, not its token
        items.append({"kind": kind, "what": what, "due": None, "seq": waiter.seq})
    for cp in checkpoints:
        if cp.status not in UNSETTLED:
            continue
        if cp.kind == CheckpointKind.SLEEP:
            items.append({"kind": "timer", "what": cp.name, "due": cp.wake_at, "seq": cp.seq})
        elif cp.kind == CheckpointKind.STEP:
            what = f"{cp.name} ({cp.status}, attempt {cp.attempts or 1}, queue {cp.queue or 'default'})"
            if cp.admission == Admission.WAITING and cp.status == CheckpointStatus.PENDING:
                what += f": waiting, {step_wait_reason(cp.queue, cp.queue_key)}"
            items.append({"kind": CheckpointKind.STEP, "what": what, "due": cp.retry_at, "seq": cp.seq})
        elif cp.kind == CheckpointKind.BREAKPOINT:
            items.append({"kind": CheckpointKind.BREAKPOINT, "what": cp.name, "due": None, "seq": cp.seq})
        elif cp.kind in (CheckpointKind.SIGNAL, CheckpointKind.EVENT) and not any(i["seq"] == cp.seq for i in items):
            items.append({"kind": cp.kind, "what": cp.name, "due": cp.wake_at, "seq": cp.seq})
    for child in children:
        if child.status in ACTIVE and not any(i["kind"] == "run" and i["what"] == child.id for i in items):
            items.append({"kind": CheckpointKind.CHILD, "what": child.id, "due": None, "seq": None})
    if not items and run.wake_at:
        items.append({"kind": "wake", "what": RECONCILE, "due": run.wake_at, "seq": None})
    return items


def next_wake(run: Run, checkpoints: list[Checkpoint]) -> dict[str, Any] | None:
    """When an active run is next looked at, and why (:func:`durable.display.wake_reason`)."""
    if run.wake_at is None or run.status not in ACTIVE:
        return None
    why, label = wake_reason(run.wake_at, checkpoints)
    return {"when": run.wake_at, "why": why, "label": label}
