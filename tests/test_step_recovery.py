"""Dispatched steps whose worker hangs or vanishes: timeouts and execution leases."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

import durable
from durable import runtime
from durable.models import Checkpoint
from durable.runtime import get_engine
from durable.testing import drive, fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

calls: Counter[str] = Counter()


@durable.step(timeout="5s", retries=1, backoff=0)
def r_slow() -> str:
    calls["r_slow"] += 1
    return "finished"


@durable.step(timeout="5s")
def r_slow_no_retry() -> str:
    calls["r_slow_no_retry"] += 1
    return "finished"


@durable.workflow(name="r_timeout")
def r_timeout(ctx, which):
    return ctx.step(which)


def _hang(run_id: str) -> None:
    """Simulate a worker that claimed the step and then hung or died."""
    now = runtime.now()
    engine = get_engine()
    claim = engine.store.claim_step(
        run_id, 1, "hung-worker", now, now + timedelta(seconds=60), engine.registry.step_timeout
    )
    assert claim is not None and claim.attempt == 1


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()


def test_timed_out_attempt_is_retried():
    with fake_clock() as fc:
        run_id = durable.start(r_timeout, "r_slow")
        drive()
        _hang(run_id)
        fc.advance("4s")
        drive()
        assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "running"
        fc.advance("2s")
        run = run_until_settled(run_id)
    cp = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert run.status == "completed" and run.output == "finished"
    assert (cp.attempts, calls["r_slow"]) == (2, 1)


def test_timed_out_attempt_without_retries_fails_the_step():
    with fake_clock() as fc:
        run_id = durable.start(r_timeout, "r_slow_no_retry")
        drive()
        _hang(run_id)
        fc.advance("6s")
        run = run_until_settled(run_id)
    assert run.status == "failed"
    assert run.error["step"]["error"]["code"] == "step_timeout"
    assert calls["r_slow_no_retry"] == 0


def test_step_of_a_vanished_worker_runs_again_under_the_same_id():
    with fake_clock() as fc:
        run_id = durable.start(r_timeout, "t_add")
        drive()
        now = runtime.now()
        # t_add has no timeout: only the execution lease can reveal the dead worker.
        claim = get_engine().store.claim_step(run_id, 1, "dead-worker", now, now + timedelta(seconds=60))
        assert claim is not None
        fc.advance("59s")
        drive()
        assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "running"
        fc.advance("2s")
        run = run_until_settled(run_id)
    assert run.status == "failed"  # t_add got no arguments: the point is it ran again
    cp = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert (cp.attempts, cp.error["type"]) == (2, "TypeError")


def test_heartbeat_renews_the_execution_lease():
    with fake_clock() as fc:
        run_id = durable.start(r_timeout, "t_add")
        drive()
        now = runtime.now()
        store = get_engine().store
        assert store.claim_step(run_id, 1, "slow-worker", now, now + timedelta(seconds=60))
        fc.advance("50s")
        store.heartbeat_step(run_id, 1, runtime.now(), {"pct": 80}, runtime.now() + timedelta(seconds=60))
        fc.advance("50s")  # 100s after the claim, 50s after the beat
        drive()
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        assert (cp.status, cp.progress) == ("running", {"pct": 80})
        fc.advance("11s")
        drive()
    assert Checkpoint.objects.get(run_id=run_id, seq=1).attempts == 2


def test_settled_step_wins_over_a_redelivery():
    run = run_until_settled(durable.start("t_three_steps", 1))
    before = list(Checkpoint.objects.filter(run_id=run.id).values_list("seq", "status", "output", "attempts"))
    assert get_engine().execute_step(run.id, 1) == "skipped"
    after = list(Checkpoint.objects.filter(run_id=run.id).values_list("seq", "status", "output", "attempts"))
    assert before == after
