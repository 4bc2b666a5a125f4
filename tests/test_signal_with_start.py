"""durable.signal_with_start: start the run if absent and deliver the signal, in one transaction."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

import durable
from durable.models import BufferedSignal, Run
from durable.runtime import get_engine
from durable.testing import run_until_settled
from tests.threads import concurrently


@durable.workflow(name="sws_collect")
def sws_collect(ctx, data):
    items = [ctx.wait_signal("add") for _ in range(data["count"])]
    return {"items": items, "input": data}


@durable.workflow(name="sws_other")
def sws_other(ctx):
    return ctx.wait_signal("add")


def signals(run_id: str) -> list[tuple[str, Any]]:
    return list(BufferedSignal.objects.filter(run_id=run_id).order_by("id").values_list("name", "payload"))


@pytest.mark.django_db
def test_an_absent_run_is_started_with_the_signal_already_delivered():
    assert durable.signal_with_start(sws_collect, "acc-1", "add", 1, input={"count": 2}, tags=["t"]) == "acc-1"
    run = Run.objects.get(id="acc-1")
    assert (run.workflow, run.status, run.input, run.tags) == ("sws_collect", "pending", {"count": 2}, ["t"])
    assert signals("acc-1") == [("add", 1)]
    assert durable.signal_with_start("sws_collect", "acc-1", "add", 2, input={"count": 99}) == "acc-1"
    assert Run.objects.filter(id="acc-1").count() == 1 and Run.objects.get(id="acc-1").input == {"count": 2}
    done = run_until_settled("acc-1")
    assert done.output == {"items": [1, 2], "input": {"count": 2}}


@pytest.mark.django_db
def test_a_waiting_run_is_only_signalled_and_woken():
    run_id = durable.start(sws_collect, {"count": 1}, run_id="acc-2")
    assert run_until_settled(run_id).status == "suspended"
    durable.signal_with_start(sws_collect, run_id, "add", {"v": 3})
    assert run_until_settled(run_id).output["items"] == [{"v": 3}]


@pytest.mark.django_db
def test_an_ended_run_or_another_workflow_is_refused_and_nothing_is_written():
    done = durable.start(sws_other, run_id="acc-3")
    durable.signal(done, "add", 0)
    assert run_until_settled(done).status == "completed"
    with pytest.raises(durable.InvalidRunState, match="no more signals"):
        durable.signal_with_start(sws_other, done, "add", 1)
    other = durable.start(sws_other, run_id="acc-4")
    with pytest.raises(durable.InvalidInput, match="a run of workflow 'sws_other', not 'sws_collect'"):
        durable.signal_with_start(sws_collect, other, "add", 1, input={"count": 1})
    assert signals(done) == [] and signals(other) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args,kwargs,error",
    [
        (("sws_collect", "acc-5", "__reserved"), {"input": {"count": 1}}, durable.InvalidInput),
        (("sws_collect", "acc-5", "add", object()), {"input": {"count": 1}}, durable.InvalidInput),
        (("sws_collect", "has space", "add"), {"input": {"count": 1}}, durable.InvalidInput),
        (("sws_collect", "acc-5", "add"), {"input": {"count": 1}, "tags": "x"}, durable.InvalidInput),
        (("nope", "acc-5", "add"), {}, durable.WorkflowNotFound),
        (("sws_collect", "acc-5", "add"), {"input": {"count": 1}, "parent": "x"}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(args, kwargs, error):
    with pytest.raises(error):
        durable.signal_with_start(*args, **kwargs)
    assert not Run.objects.exists() and not BufferedSignal.objects.exists()


@pytest.mark.django_db
def test_the_start_and_the_signal_are_one_transaction(monkeypatch):
    store = get_engine().store

    def broken_signal(*args: Any) -> bool:
        raise RuntimeError("database gone mid-way")

    monkeypatch.setattr(store, "signal", broken_signal)
    with pytest.raises(RuntimeError):
        durable.signal_with_start(sws_collect, "acc-6", "add", 1, input={"count": 1})
    assert not Run.objects.filter(id="acc-6").exists()
    monkeypatch.undo()
    with pytest.raises(ValueError), transaction.atomic():
        durable.signal_with_start(sws_collect, "acc-6", "add", 1, input={"count": 1})
        raise ValueError("the caller's own transaction rolls back")
    assert not Run.objects.filter(id="acc-6").exists() and not BufferedSignal.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_callers_give_one_run_with_every_signal_in_order():
    threads, each = 4, 25

    def caller(i: int) -> list[str]:
        return [
            durable.signal_with_start(sws_collect, "acc-race", "add", [i, k], input={"count": threads * each})
            for k in range(each)
        ]

    ids = concurrently(threads, caller)
    assert {rid for got in ids for rid in got} == {"acc-race"}
    assert Run.objects.filter(id="acc-race").count() == 1
    buffered = [payload for _, payload in signals("acc-race")]
    assert len(buffered) == threads * each
    for i in range(threads):
        # each caller's signals arrive in the order it sent them
        assert [k for t, k in buffered if t == i] == list(range(each))
    done = run_until_settled("acc-race", timeout=60)
    assert done.output["items"] == buffered  # and the run takes them first in, first out
