"""The embedded default: the in-process transport on real threads, and the worker loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection
from django.test import override_settings

import durable
from durable.models import Checkpoint
from durable.worker import WorkerLoop
from tests import workflows as w

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

gate = threading.Event()
entered = threading.Event()


@durable.workflow(name="i_gated")
def i_gated(ctx):
    def wait_for_gate():
        entered.set()
        assert gate.wait(10)
        return "through"

    return ctx.local_step("gate", wait_for_gate)


@durable.workflow(name="i_short_sleep")
def i_short_sleep(ctx):
    ctx.sleep("200ms")
    return ctx.step(w.t_add, 2, 3)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
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
    assert entered.wait(10)
    loop.stop.set()  # what SIGTERM does
    gate.set()
    thread.join(10)
    assert not thread.is_alive()
    run = durable.get_run(run_id)
    assert run.status == "completed" and run.output == "through"


def test_lease_is_renewed_while_a_long_turn_runs():
    gate.clear()
    entered.clear()
    from durable import sweeps
    from durable.runtime import get_engine

    with override_settings(DURABLE={"TRANSPORT": "manual", "LEASE": 0.6}):
        run_id = durable.start("i_gated")

        def turn() -> None:
            try:
                get_engine().run_turn(run_id)
            finally:
                connection.close()

        worker = threading.Thread(target=turn)
        worker.start()
        assert entered.wait(10)
        stolen = 0
        deadline = time.monotonic() + 2.0  # more than three lease windows
        while time.monotonic() < deadline:
            stolen += sweeps.recover_orphans(get_engine())["recovered"]
            time.sleep(0.05)
        gate.set()
        worker.join(10)
    run = durable.get_run(run_id)
    assert stolen == 0
    assert (run.status, run.recovery_attempts) == ("completed", 0)


def test_a_worker_loop_in_the_process_takes_short_timers_when_they_fall_due(monkeypatch):
    from durable.runtime import get_engine

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
        loop = WorkerLoop(interval=5)  # idle, it would look again only after five seconds
        thread = threading.Thread(target=loop.run_forever)
        thread.start()
        try:
            wait_for(lambda: transport._loop_nudge is not None)
            time.sleep(0.1)  # let the loop settle into its idle wait
            run_id = durable.start("i_short_sleep")
            # the 200 ms timer nudged the loop, whose sweep ran the wake: well before its interval
            wait_for(lambda: status(run_id) == "completed", timeout=2.5)
            assert timed == []  # nothing was timed in-process
        finally:
            loop.stop.set()
            thread.join(10)
        assert transport._loop_nudge is None  # detached: timers are timed in-process again
    assert durable.get_run(run_id).output == 5
