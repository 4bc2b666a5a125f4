"""The engine's source of "now": the Clock protocol and its two implementations.

Every timestamp the engine writes or compares (timers, leases, retry deadlines,
``ctx.now()``) comes from ``engine.clock.now()``, never from the database's
clock, so a test can install a :class:`FakeClock` and make a week-long sleep
fall due instantly.

The module-level functions below (:func:`now`, :func:`install`, ...) are the
process-wide current clock; they are kept here until the runtime module owns
that state.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Protocol

from durable.engine.durations import Duration, parse_duration
from durable.exceptions import InvalidInput


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that stands still until told to move. Thread-safe; never goes backwards."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise InvalidInput("FakeClock start must be timezone-aware")
        self._now = start or datetime.now(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, duration: Duration) -> datetime:
        """Move time forward by ``duration`` ("7d", seconds, timedelta); returns the new now."""
        delta = parse_duration(duration)
        with self._lock:
            self._now += delta
            return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise InvalidInput("FakeClock.set needs a timezone-aware datetime")
        with self._lock:
            if when < self._now:
                raise InvalidInput("a fake clock does not go backwards")
            self._now = when


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


class InstalledClock:
    """A clock that reads whichever clock is installed process-wide (follows :func:`install`)."""

    def now(self) -> datetime:
        return _current.now()
