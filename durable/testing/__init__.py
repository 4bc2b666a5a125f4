"""Test kit for workflows: drive runs in-process and control time.

Use the ``manual`` transport in tests (``DURABLE = {"TRANSPORT": "manual"}``)
so nothing runs behind your back, then::

    from durable.testing import fake_clock, run_until_settled

    def test_reminder(db):
        with fake_clock() as clock:
            run_id = durable.start(send_reminder, {"user": 1})
            run = run_until_settled(run_id)        # runs until the 7-day sleep
            assert run.status == "suspended"
            clock.advance("7d")
            assert run_until_settled(run_id).status == "completed"

``run_until_settled`` executes due work in the calling thread: pending runs,
dispatched steps, timers and retries. With the real clock it waits (in real
time) for timers that fall due before its timeout; it never moves time itself.
With a fake clock, time moves only when the test calls ``advance``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from durable import runtime
from durable.api import RunInfo, get_run
from durable.engine.clock import FakeClock
from durable.engine.core import Engine
from durable.exceptions import InvalidInput
from durable.runtime import get_engine
from durable.testing.assertions import assert_completed, assert_step_called
from durable.testing.faults import Injection, SimulatedCrash, inject_crash, inject_failure
from durable.testing.replay import ReplayDivergence, Replayed, assert_replayable, export_history, load_history
from durable.worker.tick import tick

__all__ = [
    "FakeClock",
    "Injection",
    "ReplayDivergence",
    "Replayed",
    "SimulatedCrash",
    "assert_completed",
    "assert_replayable",
    "assert_step_called",
    "drive",
    "export_history",
    "fake_clock",
    "flush_telemetry",
    "inject_crash",
    "inject_failure",
    "load_history",
    "run_until_settled",
]


def flush_telemetry() -> int:
    """Hand the OpenTelemetry observer's queued measurements and in-process step spans to the SDK now.

    With ``DURABLE["OPENTELEMETRY"]`` on, they reach the SDK from a background
    thread within a second (and at every metric collection); call this before
    reading an in-memory span exporter. Returns how many items it handed over.
    """
    return get_engine().observer.flush()


@contextmanager
def fake_clock(start: datetime | None = None) -> Iterator[FakeClock]:
    """Install a :class:`FakeClock` for the duration of the block."""
    fake = FakeClock(start)
    previous = runtime.install_clock(fake)
    try:
        yield fake
    finally:
        runtime.install_clock(previous)


def drive() -> dict[str, int]:
    """Run one pass of every sweep in this thread; returns what each did.

    An injected crash (:func:`inject_crash`) ends the pass as this process's
    death: the leases it held lapse at once (``{"crashed": 1}``), and the next
    pass recovers what they covered.
    """
    return _pass(get_engine())


def _pass(engine: Engine) -> dict[str, int]:
    try:
        return tick(engine, execute=True)
    except SimulatedCrash:
        # A dead worker's leases lapse after their term; a test need not wait for it.
        engine.store.expire_leases(engine.owner, runtime.now() - timedelta(microseconds=1))
        return {"crashed": 1}


def run_until_settled(run_id: str, timeout: float = 10.0) -> RunInfo:
    """Drive due work until ``run_id`` is terminal or waits on something not due in time.

    Returns the run as :func:`durable.get_run` does, following continue-as-new
    to the latest run of the chain. ``timeout`` is real seconds.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvalidInput(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    get_run(run_id)  # unknown ids fail fast
    deadline = time.monotonic() + timeout
    engine = get_engine()
    while True:
        counts = _pass(engine)
        run = get_run(run_id, follow=True)
        remaining = deadline - time.monotonic()
        if run.is_terminal or remaining <= 0:
            return run
        if any(counts.values()):
            continue
        if runtime.is_fake():
            return run
        due = engine.store.next_due()
        if due is None:
            return run
        wait = (due - runtime.now()).total_seconds()
        if wait > remaining:
            return run
        time.sleep(min(max(wait, 0.002), remaining))
