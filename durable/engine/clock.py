"""The engine's source of "now": the Clock protocol and its two implementations.

Every timestamp the engine writes or compares (timers, leases, retry deadlines,
``ctx.now()``) comes from ``engine.clock.now()``, never from the database's
clock, so a test can install a :class:`FakeClock` and make a week-long sleep
fall due instantly.

Pure types only: which clock is current in a process (and a clock object that
follows installs) is process-wide state, kept by :mod:`durable.runtime`.
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
