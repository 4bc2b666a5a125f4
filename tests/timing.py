"""Time under the test's control: lease beats and turn measurements that do not depend on the machine.

A test that waits for real time to pass (a lease to lapse, a keeper to beat)
or asserts on a measured duration passes or fails with the load of the
machine. These helpers let the test decide instead:

* :class:`ManualKeeper` stands in for the engine's :class:`LeaseKeeper`: it
  never renews on its own; the test calls :meth:`ManualKeeper.beat` when (in
  fake time) a renewal is due. Build an engine with it
  (``Engine(..., keeper=ManualKeeper())``) and move a fake clock past the lease.
* :func:`install_turn_timer` replaces the timer the engine measures its turns
  with (``turn_seconds``): a turn takes exactly the (fake) seconds its
  workflow code says it took (:func:`spend`), whatever the machine's load.

The real keeper's own beat (a thread on the real clock) is tested once, with
events and generous deadlines, in tests/test_units.py.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from durable.api import RunInfo
from durable.engine.durations import Duration
from durable.engine.leases import LeaseKeeper
from durable.testing import FakeClock, run_until_settled


@dataclass
class _Held:
    renew: Callable[[], bool]
    on_lost: Callable[[], None]


class _ManualHold:
    def __init__(self, keeper: ManualKeeper, key: int) -> None:
        self._keeper, self._key = keeper, key

    def release(self) -> None:
        self._keeper._forget(self._key)


class ManualKeeper(LeaseKeeper):
    """A lease keeper that renews only when the test says so (no thread, no real clock).

    ``beat()`` renews every lease held right now, as the real keeper does at
    each of its beats: a renewal that reports the lease gone drops the hold
    and calls its ``on_lost``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._manual: dict[int, _Held] = {}
        self._manual_lock = threading.Lock()
        self._next = 0

    def hold(self, interval: float, renew: Callable[[], bool], on_lost: Callable[[], None]) -> Any:
        with self._manual_lock:
            self._next += 1
            self._manual[self._next] = _Held(renew, on_lost)
            return _ManualHold(self, self._next)

    def _forget(self, key: int) -> None:
        with self._manual_lock:
            self._manual.pop(key, None)

    def held(self) -> int:
        """How many leases are held (taken and not yet released)."""
        with self._manual_lock:
            return len(self._manual)

    def beat(self) -> int:
        """Renew every lease held now; return how many renewals went through."""
        with self._manual_lock:
            held = list(self._manual.items())
        ok = 0
        for key, h in held:
            if h.renew():
                ok += 1
            else:
                self._forget(key)
                h.on_lost()
        return ok


class TurnTimer:
    """A monotonic timer that moves only when told: what the engine measures its turns with.

    ``advance(seconds)`` (from workflow code, any thread) says that much time
    passed; a turn that never advances it took no time at all.
    """

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class _TimeWithTimer:
    """The ``time`` module as the engine's turn code sees it, with the test's monotonic timer."""

    def __init__(self, timer: TurnTimer) -> None:
        self._timer = timer

    def monotonic(self) -> float:
        return self._timer.monotonic()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


# The timer installed by the running test, if any (see ``spend``).
_active: TurnTimer | None = None


def install_turn_timer(monkeypatch: pytest.MonkeyPatch) -> TurnTimer:
    """Measure the engine's turns with a fresh :class:`TurnTimer` until the test ends."""
    from durable.engine import turn  # the module whose ``time.monotonic`` times a page's turns

    timer = TurnTimer()
    monkeypatch.setattr(turn, "time", _TimeWithTimer(timer))
    monkeypatch.setattr(sys.modules[__name__], "_active", timer)
    return timer


def spend(seconds: float) -> None:
    """From workflow code: this much (fake) time passed in the turn. No-op without a timer."""
    if _active is not None:
        _active.advance(seconds)


def settle_advancing(run_id: str, clock: FakeClock, step: Duration = "1s", *, limit: int = 100) -> RunInfo:
    """Drive ``run_id`` to a terminal status, moving the fake clock ``step`` at a time while it waits.

    For retries and backoffs: each falls due when (fake) time reaches it, never
    by waiting for real time. Fails after ``limit`` steps.
    """
    run = run_until_settled(run_id)
    for _ in range(limit):
        if run.is_terminal:
            return run
        clock.advance(step)
        run = run_until_settled(run_id)
    pytest.fail(f"{run_id} still {run.status} after {limit} steps of {step}")
