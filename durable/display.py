"""How times and durations read to an operator: one format for the admin and the commands.

Every timestamp shows seconds and its timezone (``2026-12-01 10:51:02 UTC``);
every duration keeps the same precision for the same magnitude (milliseconds
under a minute, then whole units), so a column of durations lines up and
compares at a glance.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from durable.engine.vocab import UNSETTLED, CheckpointKind

#: Checkpoints that record waiting for something outside the run (drawn apart from running work).
WAIT_KINDS = frozenset(
    {CheckpointKind.SIGNAL, CheckpointKind.EVENT, CheckpointKind.UPDATE, CheckpointKind.WAIT_RUN, CheckpointKind.CHILD}
)
RECONCILE = "reconcile fallback (no timer: a safety re-check)"


def format_time(when: datetime | None, tz: tzinfo | None = None) -> str:
    """``when`` in ``tz`` (UTC by default) as ``YYYY-MM-DD HH:MM:SS TZ``; ``""`` for None."""
    if when is None:
        return ""
    local = when.astimezone(tz or UTC)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or ''}".rstrip()


def format_duration(delta: timedelta | None) -> str:
    """``0.120s``, ``12.345s``, ``12m 03s``, ``2h 04m``, ``3d 02h``; ``""`` for None."""
    if delta is None:
        return ""
    seconds = delta.total_seconds()
    if seconds < 0:
        return "-" + format_duration(-delta)
    if seconds < 60:
        return f"{seconds:.3f}s"
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {sec:02d}s"


def wake_reason(wake_at: datetime, checkpoints: Iterable[Any]) -> tuple[str, str]:
    """Why an active run wakes at ``wake_at``: ``(kind, label)``, kind one of timer, retry, timeout, reconcile.

    ``checkpoints`` are the run's history (model rows or records: ``seq``, ``name``,
    ``kind``, ``status``, ``wake_at``, ``retry_at``). A wake time no open checkpoint
    asked for is the reconcile fallback (``RECONCILE_AFTER``), not a timer the
    workflow set.
    """
    for cp in checkpoints:
        if cp.status not in UNSETTLED:
            continue
        if cp.retry_at == wake_at:
            return "retry", f"retry of #{cp.seq} {cp.name}"
        if cp.wake_at == wake_at and cp.kind == CheckpointKind.SLEEP:
            return "timer", f"timer #{cp.seq} {cp.name}"
        if cp.wake_at == wake_at and cp.kind in WAIT_KINDS:
            return "timeout", f"timeout of #{cp.seq} {cp.name}"
    return "reconcile", RECONCILE
