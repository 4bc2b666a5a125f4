"""Eager steps: a worker that consumes a step's queue runs it in the turn, under the run's lease.

The Celery worker declares the routes it consumes (``serve_routes_eagerly``);
here the test declares them for the manual transport, so one ``run_turn``
call drives the whole run in this process.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.test import override_settings

import durable
from durable.models import Checkpoint, Run
from durable.runtime import get_engine, serve_routes_eagerly
from durable.testing import fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

calls: Counter[str] = Counter()


@durable.step(name="eager_inc")
def eager_inc(x: int) -> int:
    calls["eager_inc"] += 1
    return x + 1


@durable.step(name="billing.eager_charge")
def eager_charge(x: int) -> int:
    calls["eager_charge"] += 1
    return x * 100


@durable.workflow(name="eager_chain")
def eager_chain(ctx, n):
    x = 0
    for _ in range(n):
        x = ctx.step(eager_inc, x)
    return x


@durable.workflow(name="eager_routed")
def eager_routed(ctx, x):
    return ctx.step(eager_charge, ctx.step(eager_inc, x))


@durable.workflow(name="eager_gather")
def eager_gather(ctx, x):
    return ctx.gather(durable.call(eager_inc, x), durable.call(eager_inc, x + 10))


@pytest.fixture(autouse=True)
def _routes():
    calls.clear()
    serve_routes_eagerly(frozenset([None, "durable"]))
    yield
    serve_routes_eagerly(frozenset())


def _cps(run_id):
    return list(Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "status", "attempts"))


def test_one_turn_runs_every_step_in_process_once():
    run_id = durable.start(eager_chain, 50)
    assert get_engine().run_turn(run_id) == "completed"
    run = Run.objects.get(id=run_id)
    assert (run.status, run.output) == ("completed", 50)
    assert calls["eager_inc"] == 50
    assert _cps(run_id) == [(seq, "completed", 1) for seq in range(1, 51)]
    assert run.turns == 1
    cp = Checkpoint.objects.get(run_id=run_id, seq=7)
    assert (cp.kind, cp.input, cp.output, cp.locked_by) == ("step", {"args": [6], "kwargs": {}}, 7, None)


def test_current_step_inside_an_eager_step_names_its_position():
    seen = []

    @durable.step(name="eager_who")
    def who() -> str:
        info = durable.current_step()
        seen.append((info.seq, info.attempt, info.step_id))
        return info.name

    @durable.workflow(name="eager_who_wf")
    def wf(ctx):
        ctx.uuid()
        return ctx.step(who)

    run_id = durable.start(wf)
    assert get_engine().run_turn(run_id) == "completed"
    assert seen == [(2, 1, f"{run_id}:2")]
    assert durable.current_step() is None


def test_a_step_on_a_queue_this_worker_does_not_consume_is_dispatched():
    run_id = durable.start(eager_routed, 1)
    assert get_engine().run_turn(run_id) == "suspended"
    assert calls == Counter({"eager_inc": 1})
    assert _cps(run_id) == [(1, "completed", 1), (2, "pending", 0)]
    assert run_until_settled(run_id).output == 200
    assert calls == Counter({"eager_inc": 1, "eager_charge": 1})


def test_a_fan_out_is_dispatched_not_run_one_by_one():
    run_id = durable.start(eager_gather, 1)
    assert get_engine().run_turn(run_id) == "suspended"
    assert _cps(run_id) == [(1, "pending", 0), (2, "pending", 0)]
    run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", [2, 12])
    assert calls["eager_inc"] == 2


def test_eager_steps_off_dispatches_every_step():
    with override_settings(DURABLE={"TRANSPORT": "manual", "EAGER_STEPS": False}):
        run_id = durable.start(eager_chain, 2)
        assert get_engine().run_turn(run_id) == "suspended"
        assert _cps(run_id) == [(1, "pending", 0)]
        assert run_until_settled(run_id).output == 2
    assert calls["eager_inc"] == 2


def test_a_retryable_failure_goes_back_to_the_broker_with_its_backoff():
    attempts = Counter()

    @durable.step(name="eager_flaky", retries=2, backoff=0)
    def flaky() -> str:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise ConnectionError("blip")
        return "ok"

    @durable.workflow(name="eager_flaky_wf")
    def wf(ctx):
        return ctx.step(flaky)

    run_id = durable.start(wf)
    assert get_engine().run_turn(run_id) == "suspended"
    cp = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert (cp.status, cp.attempts, cp.error["type"]) == ("pending", 1, "ConnectionError")
    serve_routes_eagerly(frozenset())
    run = run_until_settled(run_id)
    assert (run.status, run.output, attempts["n"]) == ("completed", "ok", 2)
    assert Checkpoint.objects.get(run_id=run_id, seq=1).attempts == 2


def test_a_failing_step_fails_the_run_like_a_dispatched_one():
    @durable.step(name="eager_broken")
    def broken() -> None:
        raise ValueError("no")

    @durable.workflow(name="eager_broken_wf")
    def wf(ctx):
        ctx.step(eager_inc, 1)
        ctx.step(broken)

    run_id = durable.start(wf)
    assert get_engine().run_turn(run_id) == "failed"
    run = Run.objects.get(id=run_id)
    assert (run.error["code"], run.error["step"]["name"], run.error["step"]["attempts"]) == (
        "step_failed",
        "eager_broken",
        1,
    )
    assert _cps(run_id) == [(1, "completed", 1), (2, "failed", 1)]


def test_worker_lost_mid_step_runs_the_step_again_as_a_counted_attempt():
    """The claim was durable before the step ran: the lost attempt counts, the next is attempt 2."""
    lost = {"done": False}

    @durable.step(name="eager_dies_once", retries=1, backoff=0)  # the lost attempt uses up the retry
    def dies_once() -> str:
        if not lost["done"]:
            lost["done"] = True
            raise SystemExit("worker killed")  # not an Exception: nothing is recorded
        return f"attempt {durable.current_step().attempt}"

    @durable.workflow(name="eager_dies_wf")
    def wf(ctx):
        first = ctx.step(eager_inc, 0)
        return [first, ctx.step(dies_once)]

    with fake_clock() as fc:
        run_id = durable.start(wf)
        with pytest.raises(SystemExit):
            get_engine().run_turn(run_id)
        # Step 1's result and step 2's claim were committed together, before step 2 ran.
        assert _cps(run_id) == [(1, "completed", 1), (2, "running", 1)]
        assert Run.objects.get(id=run_id).status == "running"
        serve_routes_eagerly(frozenset())  # whoever recovers it dispatches it
        fc.advance(timedelta(seconds=get_engine().settings.step_execution_lease + 1))
        run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", [1, "attempt 2"])
    assert calls["eager_inc"] == 1
    assert _cps(run_id) == [(1, "completed", 1), (2, "completed", 2)]


def test_a_claim_taken_away_mid_step_refuses_the_turn_commit():
    """The expired-step sweep handed the step to another worker: this turn's result must not land."""

    @durable.step(name="eager_slow")
    def slow() -> str:
        info = durable.current_step()
        if info.attempt == 1:
            # Meanwhile the claim is taken away (as the sweep does for a lapsed execution lease).
            Checkpoint.objects.filter(run_id=info.run_id, seq=1).update(status="pending", locked_by=None)
        return f"from attempt {info.attempt}"

    @durable.workflow(name="eager_slow_wf")
    def wf(ctx):
        return ctx.step(slow)

    run_id = durable.start(wf)
    assert get_engine().run_turn(run_id) == "lost"
    cp = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert (cp.status, cp.output) == ("pending", None)
    # The run is handed back at once (not left leased until the lease expires) and finishes
    # when the step, now pending, runs on a worker.
    assert Run.objects.get(id=run_id).status == "suspended"
    serve_routes_eagerly(frozenset())
    run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", "from attempt 2")
