"""The engine's single source of "now".

Every timestamp the engine writes or compares (timers, leases, retry deadlines,
``ctx.now()``) comes from :func:`now`, never from the database's clock, so a test
can install a fake clock and make a week-long sleep fall due instantly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


_current: Clock = SystemClock()


def now() -> datetime:
    return _current.now()


def current() -> Clock:
    return _current


def install(clock: Clock) -> Clock:
    """Make ``clock`` the process-wide clock; return the previous one to restore later."""
    global _current
    previous, _current = _current, clock
    return previous


def is_fake() -> bool:
    return not isinstance(_current, SystemClock)
