"""A schedule's specification: when its windows fall, and what each window starts.

:class:`Schedule` is a frozen value, validated when it is built (a bad cron
expression, an unknown timezone or an impossible combination raises
:class:`~durable.InvalidInput` before anything is stored). It serialises to the
JSON the schedule row keeps (:meth:`Schedule.to_json`) and back
(:meth:`Schedule.from_json`), so every process computes the same windows from
the same row. No Django here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from durable.engine.durations import Duration, to_seconds
from durable.engine.serialization import to_json
from durable.exceptions import InvalidInput

# Backfills and catch-up start at most this many windows in one call.
MAX_WINDOWS = 1000


class ScheduleOrigin(StrEnum):
    """Who declared a schedule: the code (``@workflow(schedule=...)``) or a runtime call (``create_schedule``)."""

    CODE = "code"
    RUNTIME = "runtime"


class Overlap(StrEnum):
    """What a window does while the previous run of its schedule is still active."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    CANCEL_OTHER = "cancel_other"


def parse_instant(value: Any, what: str) -> datetime | None:
    """An aware datetime (or an ISO 8601 string with an offset) as UTC; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{what} must be an ISO 8601 date-time, got {value!r}") from None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be a timezone-aware datetime, got {value!r}")
    return value.astimezone(UTC)


def check_timezone(name: Any) -> ZoneInfo:
    """The IANA zone called ``name``, or InvalidInput."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise InvalidInput(f"timezone must be an IANA zone name such as 'Europe/Lisbon', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown timezone {name!r}: use an IANA zone name such as 'Europe/Lisbon'") from None


def cron_iter(expr: str, start: datetime, *, reverse: bool = False) -> croniter:
    """croniter over naive wall-clock times; a sixth field is the seconds, first."""
    return croniter(expr, start, is_prev=reverse, second_at_beginning=True)


def check_cron(expr: Any) -> str:
    """A 5-field (minute first) or 6-field (second first) cron expression, or an alias such as ``@daily``."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidInput(f"cron must be a cron expression such as '0 2 * * *', got {expr!r}")
    text = " ".join(expr.split())
    parts = text.split(" ")
    if not (len(parts) in (5, 6) or (len(parts) == 1 and text.startswith("@"))):
        raise InvalidInput(f"cron expression {expr!r} must have 5 fields (minute first) or 6 (second first)")
    try:
        cron_iter(text, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterError, ValueError, KeyError) as exc:
        raise InvalidInput(f"invalid cron expression {expr!r}: {exc}") from None
    return text


def _opt_seconds(value: Duration | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = to_seconds(value)
    if seconds <= 0:
        raise InvalidInput(f"{what} must be a positive duration, got {value!r}")
    return seconds


@dataclass(frozen=True)
class Schedule:
    """When a workflow starts on its own: ``every`` a duration, or ``cron`` an expression.

    * ``every`` (``"15m"``, seconds, a timedelta): windows at ``start_at`` (or
      the Unix epoch) plus whole multiples of it, in absolute time.
    * ``cron``: 5 fields (minute hour day month weekday) or 6 (a seconds field
      first), evaluated on the wall clock of ``timezone``. A local time that
      does not exist (the hour skipped when clocks go forward) fires once at
      the first valid instant after it; a local time that happens twice (the
      hour repeated when clocks go back) fires once, at its first occurrence.
    * ``input``: the JSON input of every run it starts.
    * ``overlap``: see :class:`Overlap`. ``jitter``: a duration; each window
      starts later by a stable pseudo-random part of it, the same on every
      process, without changing its run id.
    * ``catch_up``: after downtime, start at most the last N missed windows.
    * ``start_at`` / ``end_at``: aware datetimes bounding the windows (inclusive).
    * ``paused``: a new schedule starts paused (an existing one keeps its state).

    Raises :class:`~durable.InvalidInput` on a bad value. Immutable; fields
    are normalised (durations to seconds, instants to UTC).
    """

    every: Any = None
    cron: str | None = None
    timezone: str = "UTC"
    input: Any = None
    overlap: Any = Overlap.ALLOW
    jitter: Any = None
    catch_up: int = 1
    start_at: Any = None
    end_at: Any = None
    paused: bool = False

    def __post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise InvalidInput("a schedule needs exactly one of every= or cron=")
        set_ = object.__setattr__
        set_(self, "every", _opt_seconds(self.every, "every"))
        if self.cron is not None:
            set_(self, "cron", check_cron(self.cron))
        check_timezone(self.timezone)
        set_(self, "input", to_json(self.input, "schedule input", max_bytes=256 * 1024))
        try:
            set_(self, "overlap", Overlap(self.overlap))
        except ValueError:
            choices = ", ".join(repr(o.value) for o in Overlap)
            raise InvalidInput(f"overlap must be one of {choices}, got {self.overlap!r}") from None
        set_(self, "jitter", _opt_seconds(self.jitter, "jitter"))
        catch_up = self.catch_up
        if isinstance(catch_up, bool) or not isinstance(catch_up, int) or not 1 <= catch_up <= MAX_WINDOWS:
            raise InvalidInput(f"catch_up must be an integer from 1 to {MAX_WINDOWS}, got {catch_up!r}")
        start_at = parse_instant(self.start_at, "start_at")
        end_at = parse_instant(self.end_at, "end_at")
        if start_at is not None and end_at is not None and end_at < start_at:
            raise InvalidInput("end_at must not be before start_at")
        set_(self, "start_at", start_at)
        set_(self, "end_at", end_at)
        if not isinstance(self.paused, bool):
            raise InvalidInput(f"paused must be a boolean, got {self.paused!r}")

    @property
    def zone(self) -> ZoneInfo:
        """The :class:`zoneinfo.ZoneInfo` of :attr:`timezone`."""
        return ZoneInfo(self.timezone)

    def to_json(self) -> dict[str, Any]:
        """The spec as the schedule row stores it (``paused`` is the row's own column)."""
        return {
            "every": self.every,
            "cron": self.cron,
            "timezone": self.timezone,
            "input": self.input,
            "overlap": str(self.overlap),
            "jitter": self.jitter,
            "catch_up": self.catch_up,
            "start_at": self.start_at.isoformat() if self.start_at else None,
            "end_at": self.end_at.isoformat() if self.end_at else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, paused: bool = False) -> Schedule:
        """The spec a row stores, validated again (a hand-edited row fails loudly)."""
        known = {f.name for f in fields(cls)} - {"paused"}
        return cls(**{k: v for k, v in data.items() if k in known}, paused=paused)

    def changed(self, **changes: Any) -> Schedule:
        """A copy with ``changes`` applied and validated; choosing ``every`` drops ``cron`` and back."""
        if changes.get("every") is not None:
            changes.setdefault("cron", None)
        if changes.get("cron") is not None:
            changes.setdefault("every", None)
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise InvalidInput(f"unknown schedule fields: {', '.join(sorted(unknown))}")
        return replace(self, **changes)


SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Schedule) if f.name != "paused")
