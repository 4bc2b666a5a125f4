"""Eager steps: a worker that consumes a step's queue claims it in the turn's commit and runs it.

The Celery worker declares the routes it consumes (``serve_routes_eagerly``);
here the test declares them for the manual transport, so one ``run_turn``
call drives the whole run in this process, loop by loop.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.test import override_settings

import durable
from durable.engine import steps as engine_steps
from durable.models import Checkpoint, Run
from durable.runtime import get_engine, serve_routes_eagerly
from durable.testing import drive, fake_clock, run_until_settled

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


def test_one_turn_call_runs_every_step_in_process_once():
    run_id = durable.start(eager_chain, 50)
    assert get_engine().run_turn(run_id) == "completed"
    run = Run.objects.get(id=run_id)
    assert (run.status, run.output) == ("completed", 50)
    assert calls["eager_inc"] == 50
    assert _cps(run_id) == [(seq, "completed", 1) for seq in range(1, 51)]
    # Each step result continued the run: one turn per step, plus the first.
    assert run.turns == 51


def test_a_step_on_a_queue_this_worker_does_not_consume_is_dispatched():
    run_id = durable.start(eager_routed, 1)
    assert get_engine().run_turn(run_id) == "suspended"
    assert calls == Counter({"eager_inc": 1})
    assert _cps(run_id) == [(1, "completed", 1), (2, "pending", 0)]
    assert run_until_settled(run_id).output == 200
    assert calls == Counter({"eager_inc": 1, "eager_charge": 1})


def test_only_one_step_of_a_fan_out_is_claimed_the_others_are_dispatched():
    run_id = durable.start(eager_gather, 1)
    assert get_engine().run_turn(run_id) == "suspended"
    assert sorted(status for _, status, _ in _cps(run_id)) == ["completed", "pending"]
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


def test_worker_dying_after_the_claiming_commit_leaves_the_step_to_the_execution_lease(monkeypatch):
    """The claim rides in the turn's commit; if the worker dies before running it, the lease expires."""
    with fake_clock() as fc:
        monkeypatch.setattr(engine_steps, "run_claimed", lambda engine, claim, inline: ("died", None))
        run_id = durable.start(eager_chain, 2)
        assert get_engine().run_turn(run_id) == "suspended"
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        assert (cp.status, cp.attempts, cp.locked_by) == ("running", 1, get_engine().owner)
        monkeypatch.undo()
        serve_routes_eagerly(frozenset())  # the replacement worker dispatches normally
        fc.advance(timedelta(seconds=get_engine().settings.step_execution_lease - 1))
        drive()
        assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "running"
        fc.advance("2s")
        run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", 2)
    assert calls["eager_inc"] == 2  # the claimed attempt never ran; the retry ran it once
    assert _cps(run_id) == [(1, "completed", 2), (2, "completed", 1)]
