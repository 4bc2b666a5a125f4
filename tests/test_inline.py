"""The embedded default: the in-process transport on real threads, and the worker loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection
from django.test import override_settings

import durable
from durable import conf, runtime
from durable import worker as sweeps
from durable.engine.core import Engine
from durable.models import Checkpoint
from durable.runtime import get_engine
from durable.store import store
from durable.testing import fake_clock
from durable.transports.manual import ManualTransport
from durable.worker import WorkerLoop
from tests import workflows as w
from tests.threads import SETTLE
from tests.timing import ManualKeeper

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

gate = threading.Event()
entered = threading.Event()


@durable.workflow(name="i_gated")
def i_gated(ctx):
    def wait_for_gate():
        entered.set()
        assert gate.wait(SETTLE)
        return "through"

    return ctx.local_step("gate", wait_for_gate)


@durable.workflow(name="i_short_sleep")
def i_short_sleep(ctx):
    ctx.sleep("200ms")
    return ctx.step(w.t_add, 2, 3)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll until ``predicate`` holds; the deadline only catches a run that is truly stuck."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def status(run_id: str) -> str:
    return durable.get_run(run_id).status


def test_inline_transport_runs_steps_and_timers_on_threads():
    w.reset()
    with override_settings(DURABLE={"TRANSPORT": "inline", "WORKER_THREADS": 2}):
        a = durable.start("t_three_steps", 5)
        b = durable.start("i_short_sleep")
        wait_for(lambda: status(a) == "completed" and status(b) == "completed")
        assert durable.get_run(a).output == 22 and durable.get_run(b).output == 5
        assert w.calls["t_add"] == 3
        assert Checkpoint.objects.filter(run_id=a).count() == 3


def test_worker_loop_drains_the_item_in_progress_on_stop():
    gate.clear()
    entered.clear()
    run_id = durable.start("i_gated")
    loop = WorkerLoop(interval=0.05)
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    assert entered.wait(SETTLE)
    loop.stop.set()  # what SIGTERM does
    gate.set()
    thread.join(SETTLE)
    assert not thread.is_alive()
    run = durable.get_run(run_id)
    assert run.status == "completed" and run.output == "through"


def test_lease_is_renewed_while_a_long_turn_runs():
    """Three lease windows pass (in fake time) while the turn runs; its keeper's beats keep the lease."""
    gate.clear()
    entered.clear()
    keeper = ManualKeeper()  # beats when the test says, as the real one does every third of the lease
    with fake_clock() as clock:
        engine = Engine(
            store,
            ManualTransport(),
            conf.get(),
            registry=runtime.registry,
            clock=runtime.clock,
            owner="long-turn",
            keeper=keeper,
        )
        run_id = durable.start("i_gated")

        def turn() -> None:
            try:
                engine.run_turn(run_id)
            finally:
                connection.close()

        worker = threading.Thread(target=turn)
        worker.start()
        assert entered.wait(SETTLE)
        stolen = 0
        lease = engine.settings.lease
        for _ in range(10):  # more than three lease windows
            clock.advance(lease / 3)
            assert keeper.beat() == 1  # the turn's lease, renewed from now on
            stolen += sweeps.recover_orphans(get_engine())["recovered"]
        gate.set()
        worker.join(SETTLE)
    run = durable.get_run(run_id)
    assert stolen == 0
    assert (run.status, run.recovery_attempts) == ("completed", 0)
    assert keeper.held() == 0


def test_a_worker_loop_in_the_process_takes_short_timers_when_they_fall_due(monkeypatch):
    w.reset()
    with override_settings(DURABLE={"TRANSPORT": "inline", "WORKER_THREADS": 2}):
        transport = get_engine().transport
        timed: list[float] = []
        submit = transport._submit

        def spy(job, delay):
            if delay > 0:
                timed.append(delay)
            return submit(job, delay)

        monkeypatch.setattr(transport, "_submit", spy)
        loop = WorkerLoop(interval=3600)  # idle, it would look again only after an hour
        thread = threading.Thread(target=loop.run_forever)
        thread.start()
        try:
            wait_for(lambda: transport._loop_nudge is not None)
            wait_for(lambda: loop._idle_until != float("inf"))  # the loop settled into its idle wait
            run_id = durable.start("i_short_sleep")
            # the 200 ms timer nudged the loop, whose sweep ran the wake: well before its interval
            wait_for(lambda: status(run_id) == "completed", timeout=60)
            assert timed == []  # nothing was timed in-process
        finally:
            loop.stop.set()
            thread.join(SETTLE)
        assert transport._loop_nudge is None  # detached: timers are timed in-process again
    assert durable.get_run(run_id).output == 5
