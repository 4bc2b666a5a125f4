"""Operator repairs, lost-dispatch self-heal and late results (in-process, any database)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings

import durable
from durable import runtime
from durable import worker as sweeps
from durable.engine.ports import Transport
from durable.models import Checkpoint, Run
from durable.runtime import get_engine
from durable.testing import drive, fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

calls: Counter[str] = Counter()
behaviour: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    behaviour.clear()


class Recorder(Transport):
    """A transport that records what would have been sent."""

    def __init__(self) -> None:
        self.turns: list[str] = []
        self.steps: list[tuple[str, int, str | None]] = []

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        self.turns.append(run_id)

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> None:
        if delay <= 60:
            self.steps.append((run_id, seq, queue))


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(get_engine(), "transport", rec)
    return rec


@durable.step(name="billing.charge")
def charge(amount: int) -> dict[str, Any]:
    calls["charge"] += 1
    if behaviour.get("charge_fails", 0) >= calls["charge"]:
        raise ConnectionError("provider down")
    return {"charged": amount}


@durable.step(retries=1, backoff="5m")
def slow_retry() -> str:
    calls["slow_retry"] += 1
    if calls["slow_retry"] == 1:
        raise ConnectionError("first attempt fails")
    return "ok"


@durable.workflow(name="p_checkout")
def p_checkout(ctx, data):
    ctx.local_step("reserve", lambda: calls.update(["reserve"]))
    charged = ctx.step(charge, data["amount"])
    ctx.local_step("confirm", lambda: calls.update(["confirm"]))
    return charged


@durable.workflow(name="p_slow_retry")
def p_slow_retry(ctx):
    return ctx.step(slow_retry)


def test_step_routes_by_name_prefix_or_queue():
    from durable.runtime import registry

    assert registry.get_step("billing.charge").route == "billing"
    assert registry.get_step("slow_retry").route is None


# -- requeue -------------------------------------------------------------------


def test_requeue_really_reruns_the_failed_step():
    behaviour["charge_fails"] = 1
    run = run_until_settled(durable.start(p_checkout, {"amount": 5}))
    assert run.status == "failed" and calls["charge"] == 1
    durable.requeue(run.id)
    assert durable.get_run(run.id).status == "pending"
    run = run_until_settled(run.id)
    assert run.status == "completed" and run.output == {"charged": 5}
    # reserve ran once (kept), charge twice (failed, then really re-executed), confirm once
    assert (calls["reserve"], calls["charge"], calls["confirm"]) == (1, 2, 1)
    assert list(Checkpoint.objects.filter(run_id=run.id).values_list("seq", "status")) == [
        (1, "completed"),
        (2, "completed"),
        (3, "completed"),
    ]


def test_requeue_of_a_dead_run_resets_its_recovery_count():
    run_id = durable.start(p_checkout, {"amount": 1})
    Run.objects.filter(id=run_id).update(
        status="running", locked_by="gone", locked_until=runtime.now() - timedelta(seconds=1), recovery_attempts=5
    )
    drive()
    assert durable.get_run(run_id).status == "dead"
    durable.requeue(run_id)
    run = run_until_settled(run_id)
    assert (run.status, run.recovery_attempts) == ("completed", 0)


@pytest.mark.parametrize("status", ["pending", "suspended", "completed", "cancelled"])
def test_requeue_refuses_other_statuses(status):
    run_id = durable.start(p_checkout, {"amount": 1})
    Run.objects.filter(id=run_id).update(status=status)
    with pytest.raises(durable.InvalidRunState, match=status):
        durable.requeue(run_id)
    assert durable.get_run(run_id).status == status


def test_repairs_refuse_unknown_runs():
    for fn in (durable.requeue, durable.redispatch_pending):
        with pytest.raises(durable.RunNotFound):
            fn("missing")
    with pytest.raises(durable.RunNotFound):
        durable.retry_with_input("missing", {})


# -- retry with input ----------------------------------------------------------


def test_retry_with_input_starts_a_clean_new_run():
    run = run_until_settled(durable.start(p_checkout, {"nope": 1}, tags=["t"], namespace="shop"))
    assert run.status == "failed" and run.error["type"] == "KeyError"
    new_id = durable.retry_with_input(run.id, {"amount": 9})
    assert new_id.startswith(f"{run.id}~retry~")
    new = durable.get_run(new_id)
    assert (new.retry_of, new.namespace, new.tags, new.input) == (run.id, "shop", ["t"], {"amount": 9})
    assert not Checkpoint.objects.filter(run_id=new_id).exists()
    assert run_until_settled(new_id).output == {"charged": 9}
    assert durable.get_run(run.id).status == "failed"  # the original is left as it was


def test_retry_with_input_refuses_bad_input_and_active_runs():
    run_id = durable.start(p_checkout, {"amount": 1})
    with pytest.raises(durable.InvalidRunState):
        durable.retry_with_input(run_id, {"amount": 2})
    Run.objects.filter(id=run_id).update(status="failed")
    with pytest.raises(durable.InvalidInput):
        durable.retry_with_input(run_id, {"amount": object()})
    assert Run.objects.count() == 1


# -- redispatch ----------------------------------------------------------------


def test_redispatch_pending_resends_the_same_step_ids(recorder, django_capture_on_commit_callbacks):
    run_id = durable.start(p_checkout, {"amount": 3})
    get_engine().run_turn(run_id)
    assert recorder.steps == [(run_id, 2, "billing")]
    with django_capture_on_commit_callbacks(execute=True):
        assert durable.redispatch_pending(run_id) == 1
    assert recorder.steps == [(run_id, 2, "billing"), (run_id, 2, "billing")]
    # Both deliveries arrive: the step runs once, the second finds it settled.
    assert get_engine().execute_step(run_id, 2, continue_turn=False) == "completed"
    assert get_engine().execute_step(run_id, 2, continue_turn=False) == "skipped"
    assert calls["charge"] == 1


def test_redispatch_refuses_finished_runs():
    run = run_until_settled(durable.start(p_checkout, {"amount": 3}))
    with pytest.raises(durable.InvalidRunState):
        durable.redispatch_pending(run.id)


# -- lost-dispatch self-heal ----------------------------------------------------


def test_lost_dispatch_is_redispatched_then_fails_as_remote_step_lost(recorder):
    with override_settings(DURABLE={"TRANSPORT": "manual", "STEP_LEASE": "10s", "STEP_REDISPATCH_MAX": 2}):
        engine = get_engine()
        engine.transport = recorder
        with fake_clock() as fc:
            run_id = durable.start(p_checkout, {"amount": 1})
            engine.run_turn(run_id)
            assert len(recorder.steps) == 1
            fc.advance("9s")
            sweeps.tick(engine, execute=False)
            assert len(recorder.steps) == 1  # still within the lease
            fc.advance("1s")
            sweeps.tick(engine, execute=False)  # re-sent; the next after twice the window
            fc.advance("19s")
            sweeps.tick(engine, execute=False)
            assert len(recorder.steps) == 2
            fc.advance("1s")
            sweeps.tick(engine, execute=False)
            assert recorder.steps == [(run_id, 2, "billing")] * 3
            fc.advance("40s")
            counts = sweeps.tick(engine, execute=False)
            assert counts["lost"] == 1
            engine.run_turn(run_id)
    run = durable.get_run(run_id)
    assert run.status == "failed"
    assert run.error["step"]["error"]["code"] == "remote_step_lost"
    assert calls["charge"] == 0 and calls["confirm"] == 0


def test_a_claimed_step_is_never_redispatched(recorder):
    with override_settings(DURABLE={"TRANSPORT": "manual", "STEP_LEASE": "10s"}):
        engine = get_engine()
        engine.transport = recorder
        with fake_clock() as fc:
            run_id = durable.start(p_checkout, {"amount": 1})
            engine.run_turn(run_id)
            now = runtime.now()
            assert engine.store.claim_step(run_id, 2, "busy-worker", now, now + timedelta(seconds=60))
            for _ in range(5):
                fc.advance("10s")
                engine.store.heartbeat_step(run_id, 2, runtime.now(), None, runtime.now() + timedelta(seconds=60))
                sweeps.tick(engine, execute=False)
    assert len(recorder.steps) == 1
    assert Checkpoint.objects.get(run_id=run_id, seq=2).status == "running"


def test_a_long_retry_delay_is_dispatched_by_the_sweep_when_due(recorder):
    engine = get_engine()
    with fake_clock() as fc:
        run_id = durable.start(p_slow_retry)
        engine.run_turn(run_id)
        assert engine.execute_step(run_id, 1) == "retrying"
        assert len(recorder.steps) == 1  # the 5-minute delay is not held in the broker
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        assert cp.retry_at == runtime.now() + timedelta(minutes=5)
        assert engine.execute_step(run_id, 1) == "skipped"  # too early
        fc.advance("5m")
        sweeps.tick(engine, execute=False)
        assert recorder.steps[-1] == (run_id, 1, None)
        assert engine.execute_step(run_id, 1) == "completed"
    assert durable.get_run(run_id).status == "completed"
    assert calls["slow_retry"] == 2


# -- late and duplicate results ---------------------------------------------------


def test_late_result_for_a_cancelled_run_is_ignored(recorder):
    engine = get_engine()
    run_id = durable.start(p_checkout, {"amount": 1})
    engine.run_turn(run_id)
    durable.cancel(run_id)
    assert engine.store.finish_step(run_id, 2, runtime.now(), output={"late": True}) is False
    assert Checkpoint.objects.get(run_id=run_id, seq=2).status == "pending"
    assert engine.execute_step(run_id, 2) == "skipped"
    assert calls["charge"] == 0 and durable.get_run(run_id).status == "cancelled"


def test_late_success_for_a_failed_run_is_kept_but_does_not_resume_it(recorder):
    engine = get_engine()
    run_id = durable.start(p_checkout, {"amount": 1})
    engine.run_turn(run_id)
    Run.objects.filter(id=run_id).update(status="failed")
    assert engine.store.finish_step(run_id, 2, runtime.now(), output={"charged": 1}) is False
    assert Checkpoint.objects.get(run_id=run_id, seq=2).status == "completed"
    assert durable.get_run(run_id).status == "failed"
    durable.requeue(run_id)
    run = run_until_settled(run_id)
    assert run.status == "completed" and run.output == {"charged": 1}
    assert calls["charge"] == 0  # the late result was used, not re-executed


def test_duplicate_result_writes_once_and_still_redrives_the_resume(recorder):
    engine = get_engine()
    run_id = durable.start(p_checkout, {"amount": 1})
    engine.run_turn(run_id)
    assert engine.store.finish_step(run_id, 2, runtime.now(), output={"charged": 1}) is True
    # The resume that should follow is lost; the run is left suspended but due.
    Run.objects.filter(id=run_id).update(wake_at=runtime.now() + timedelta(hours=1))
    assert engine.store.finish_step(run_id, 2, runtime.now(), output={"charged": 999}) is True
    assert Checkpoint.objects.filter(run_id=run_id, seq=2).count() == 1
    assert Checkpoint.objects.get(run_id=run_id, seq=2).output == {"charged": 1}
    run = run_until_settled(run_id)
    assert run.status == "completed" and run.output == {"charged": 1}
