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
from durable.worker import recover_steps
from tests.threads import concurrently

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


@durable.step(retries=1, backoff=0)
def r_retried() -> str:
    calls["r_retried"] += 1
    return "ran again"


def test_step_of_a_vanished_worker_runs_again_under_the_same_id():
    with fake_clock() as fc:
        run_id = durable.start(r_timeout, "r_retried")
        drive()
        now = runtime.now()
        # r_retried has no timeout: only the execution lease can reveal the dead worker.
        claim = get_engine().store.claim_step(run_id, 1, "dead-worker", now, now + timedelta(seconds=60))
        assert claim is not None
        fc.advance("59s")
        drive()
        assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "running"
        fc.advance("2s")
        run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", "ran again")
    cp = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert (cp.attempts, calls["r_retried"]) == (2, 1)  # the lost attempt counted, the retry ran it


def test_heartbeat_renews_the_execution_lease():
    with fake_clock() as fc:
        run_id = durable.start(r_timeout, "r_retried")
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


# -- a step that takes its worker down with it (a poison step) --------------------------
POISON_BACKOFF = durable.Backoff(initial=10, factor=2)


@durable.step(retries=2, backoff=POISON_BACKOFF)
def r_poison() -> str:
    calls["r_poison"] += 1
    return "survived"


@durable.workflow(name="r_guarded")
def r_guarded(ctx, which):
    try:
        return ctx.step(which)
    except durable.StepFailed as exc:
        return {"caught": exc.error["code"], "attempts": exc.attempts}


def _claim_and_die(run_id: str, attempt: int, fc) -> int:
    """A worker claims step 1 (attempt ``attempt``) and dies with it; its execution lease (60s) lapses.

    Returns what the expired-step sweep did about it.
    """
    now = runtime.now()
    engine = get_engine()
    claim = engine.store.claim_step(run_id, 1, f"doomed-{attempt}", now, now + timedelta(seconds=60))
    assert claim is not None and claim.attempt == attempt
    fc.advance("61s")
    return recover_steps(engine, execute=False)


def _step(run_id: str) -> Checkpoint:
    return Checkpoint.objects.get(run_id=run_id, seq=1)


def test_a_lapsed_execution_lease_is_a_failed_attempt_under_the_retry_policy():
    """Each lost worker costs one attempt, retried after the step's backoff; then ``worker_lost``."""
    with fake_clock() as fc:
        run_id = durable.start(r_guarded, "r_poison")
        drive()
        assert _claim_and_die(run_id, 1, fc) == 1
        cp = _step(run_id)
        assert (cp.status, cp.attempts, cp.error["code"], cp.locked_by) == ("pending", 1, "worker_lost", None)
        assert cp.retry_at == runtime.now() + timedelta(seconds=POISON_BACKOFF.delay(1))  # 10s
        fc.advance("9s")
        assert get_engine().store.claim_step(run_id, 1, "early", runtime.now(), runtime.now()) is None
        fc.advance("1s")
        assert _claim_and_die(run_id, 2, fc) == 1
        cp = _step(run_id)
        assert (cp.status, cp.attempts) == ("pending", 2)
        assert cp.retry_at == runtime.now() + timedelta(seconds=POISON_BACKOFF.delay(2))  # 20s
        fc.advance("20s")
        assert _claim_and_die(run_id, 3, fc) == 1
        cp = _step(run_id)
        assert (cp.status, cp.attempts, cp.error["code"], cp.error["retryable"]) == ("failed", 3, "worker_lost", True)
        assert recover_steps(get_engine(), execute=False) == 0  # settled: nothing left to do
        run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", {"caught": "worker_lost", "attempts": 3})
    assert calls["r_poison"] == 0  # every attempt died before it could finish


def test_a_step_lost_past_its_retries_fails_an_unguarded_run_with_worker_lost():
    with fake_clock() as fc:
        run_id = durable.start(r_timeout, "t_add")  # t_add: no retries
        drive()
        assert _claim_and_die(run_id, 1, fc) == 1
        run = run_until_settled(run_id)
    assert run.status == "failed"
    assert (run.error["step"]["error"]["code"], run.error["step"]["attempts"]) == ("worker_lost", 1)


@durable.step(retries=1, backoff=0)
def r_outlived() -> str:
    """Runs past its execution lease: meanwhile the sweep takes the attempt away from it."""
    calls["r_outlived"] += 1
    if calls["r_outlived"] == 1:
        runtime.current_clock().advance("61s")
        assert recover_steps(get_engine(), execute=False) == 1
    return f"attempt {calls['r_outlived']}"


def test_a_late_result_of_a_lapsed_attempt_is_refused():
    """The worker was not dead after all: its result comes after the sweep counted the attempt lost."""
    with fake_clock():
        run_id = durable.start(r_guarded, "r_outlived")
        drive()
        assert get_engine().execute_step(run_id, 1) == "completed"  # it ran to the end...
        cp = _step(run_id)
        # ...but its claim was gone: the result is refused, the retry stands.
        assert (cp.status, cp.attempts, cp.output, cp.error["code"]) == ("pending", 1, None, "worker_lost")
        run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", "attempt 2")
    assert (_step(run_id).attempts, calls["r_outlived"]) == (2, 2)


@pytest.mark.django_db(transaction=True)
def test_sweepers_racing_on_a_lapsed_attempt_record_it_once():
    """Four sweepers find the same lapsed attempt at once: one records it, one retry is dispatched."""
    dispatched: list[tuple[str, int]] = []
    with fake_clock() as fc:
        run_id = durable.start(r_guarded, "r_poison")
        drive()
        now = runtime.now()
        assert get_engine().store.claim_step(run_id, 1, "doomed", now, now + timedelta(seconds=60))
        fc.advance("61s")
        engine = get_engine()
        original = engine.transport.dispatch_step
        engine.transport.dispatch_step = lambda run, seq, queue, delay=0.0, namespace=None: dispatched.append(
            (run, seq)
        )
        try:
            done = concurrently(4, lambda i: recover_steps(engine, execute=False))
        finally:
            engine.transport.dispatch_step = original
    assert sorted(done) == [0, 0, 0, 1]
    assert dispatched == [(run_id, 1)]
    cp = _step(run_id)
    assert (cp.status, cp.attempts, cp.error["code"]) == ("pending", 1, "worker_lost")
