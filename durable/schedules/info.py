"""A schedule as the runtime API, the admin and the REST API return it, and its spec in words."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable.schedules.plan import ScheduleRecord
from durable.schedules.spec import Schedule
from durable.schedules.windows import next_window

_DAYS = {
    "0": "Sunday",
    "1": "Monday",
    "2": "Tuesday",
    "3": "Wednesday",
    "4": "Thursday",
    "5": "Friday",
    "6": "Saturday",
    "7": "Sunday",
}
_UNITS = ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second"))


def _every_words(seconds: float) -> str:
    for size, unit in _UNITS:
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {seconds:g} seconds"


def _cron_words(expr: str) -> str | None:
    """Common 5-field shapes in words; None for the others."""
    parts = expr.split(" ")
    if len(parts) != 5:
        return None
    minute, hour, dom, month, dow = parts
    if minute.startswith("*/") and minute[2:].isdigit() and parts[1:] == ["*", "*", "*", "*"]:
        return _every_words(int(minute[2:]) * 60)
    if not (minute.isdigit() and hour.isdigit() and month == "*"):
        return None
    at = f"at {int(hour):02d}:{int(minute):02d}"
    if dom == "*" and dow == "*":
        return f"every day {at}"
    if dom == "*" and dow in _DAYS:
        return f"every {_DAYS[dow]} {at}"
    if dow == "*" and dom.isdigit():
        return f"on day {int(dom)} of every month {at}"
    return None


def describe(spec: Schedule) -> str:
    """The spec in words: ``every 15 minutes``, ``every day at 02:00 (Europe/Lisbon)``, ``cron "..." (UTC)``."""
    if spec.every is not None:
        return _every_words(float(spec.every))
    assert spec.cron is not None
    words = _cron_words(spec.cron) or f'cron "{spec.cron}"'
    return f"{words} ({spec.timezone})"


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule's spec and where its windows stand (a snapshot; read again for fresh values).

    ``next_window``: the next window not yet acted on (None: the schedule has
    ended). ``last_run_id``: the run its last window or trigger started.
    ``skipped``: windows skipped by ``overlap="skip"`` (or beyond the one
    ``buffer_one`` keeps). ``buffered``: the window waiting under ``buffer_one``.
    """

    key: str
    workflow: str
    schedule: Schedule
    paused: bool
    origin: str
    next_window: datetime | None
    last_run_id: str | None
    last_window: datetime | None
    skipped: int
    buffered: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_record(cls, rec: ScheduleRecord) -> ScheduleInfo:
        """The snapshot of a stored row."""
        return cls(
            key=rec.key,
            workflow=rec.workflow,
            schedule=rec.schedule,
            paused=rec.paused,
            origin=rec.origin,
            next_window=rec.next_window,
            last_run_id=rec.last_run_id,
            last_window=rec.last_window,
            skipped=rec.skipped,
            buffered=rec.buffered,
            created_at=rec.created_at,
            updated_at=rec.updated_at,
        )

    @property
    def description(self) -> str:
        """The spec in words (see :func:`describe`)."""
        return describe(self.schedule)

    def upcoming(self, count: int = 5) -> list[datetime]:
        """The next ``count`` windows, starting with :attr:`next_window`."""
        found: list[datetime] = []
        nxt = self.next_window
        while nxt is not None and len(found) < count:
            found.append(nxt)
            nxt = next_window(self.schedule, nxt)
        return found

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the API's and ``durable_schedules --json``'s shape."""

        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        return {
            "key": self.key,
            "workflow": self.workflow,
            **self.schedule.to_json(),
            "paused": self.paused,
            "origin": self.origin,
            "description": self.description,
            "next_window": iso(self.next_window),
            "upcoming": [w.isoformat() for w in self.upcoming(5)],
            "last_run_id": self.last_run_id,
            "last_window": iso(self.last_window),
            "skipped": self.skipped,
            "buffered": iso(self.buffered),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }
