"""Singleton workflows: at most ``limit`` runs per key at a time, the others queued FIFO (any database)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

import durable
from durable.engine.vocab import RunStatus
from durable.models import Run, SingletonSlot
from durable.runtime import get_engine
from durable.testing import drive, fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

order: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    order.clear()


@durable.workflow(name="s_sync", singleton=durable.Singleton(key="customer"))
def s_sync(ctx: Any, data: dict[str, Any]) -> str:
    ctx.local_step("began", lambda: order.append(data["n"]))
    ctx.wait_signal("go")
    return data["n"]


@durable.workflow(name="s_pair", singleton=durable.Singleton(key=lambda data: data["customer"], limit=2))
def s_pair(ctx: Any, data: dict[str, Any]) -> str:
    ctx.wait_signal("go")
    return data["n"]


@durable.workflow(name="s_quota", singleton=durable.Singleton(key="customer", max_queue_depth=2))
def s_quota(ctx: Any, data: dict[str, Any]) -> str:
    ctx.wait_signal("go")
    return data["n"]


@durable.workflow(name="s_strict", singleton=durable.Singleton(key="customer", max_queue_depth=0))
def s_strict(ctx: Any, data: dict[str, Any]) -> str:
    ctx.wait_signal("go")
    return data["n"]


@durable.workflow(name="s_boom", singleton=durable.Singleton(key="customer"))
def s_boom(ctx: Any, data: dict[str, Any]) -> str:
    if data.get("fail"):
        raise ValueError("boom")
    return data["n"]


def statuses(workflow: str) -> dict[str, str]:
    return dict(Run.objects.filter(workflow=workflow).order_by("singleton_seq").values_list("id", "status"))


def start(workflow: Any, n: str, customer: str = "c1", **kwargs: Any) -> str:
    return durable.start(workflow, {"customer": customer, "n": n}, run_id=f"{customer}-{n}", **kwargs)


def test_one_run_per_key_runs_the_others_wait_queued_in_order():
    for n in "abc":
        start(s_sync, n)
    start(s_sync, "x", customer="c2")
    drive()
    assert statuses("s_sync") == {
        "c1-a": "suspended",
        "c2-x": "suspended",
        "c1-b": "queued",
        "c1-c": "queued",
    }
    waiting = Run.objects.get(id="c1-b")
    assert (waiting.singleton_key, waiting.singleton_limit) == ("c1", 1)
    assert waiting.error["code"] == "singleton_queued"
    assert "waiting for singleton key 'c1'" in waiting.error["message"]
    assert durable.get_run("c1-b").status == RunStatus.QUEUED
    durable.signal("c1-a", "go")
    drive()
    assert statuses("s_sync")["c1-b"] == "pending"  # admitted by the commit that finished c1-a
    assert statuses("s_sync")["c1-c"] == "queued"
    admitted = Run.objects.get(id="c1-b")
    assert admitted.error is None and admitted.wake_at is not None  # due now
    drive()
    durable.signal("c1-b", "go")
    drive()
    durable.signal("c1-c", "go")
    drive()
    assert order == ["a", "x", "b", "c"]
    assert set(statuses("s_sync").values()) == {"completed", "suspended"}


def test_the_finishing_commit_admits_the_next_run_at_once():
    start(s_sync, "a")
    start(s_sync, "b")
    drive()
    engine = get_engine()
    durable.signal("c1-a", "go")
    # One turn of the first run, no sweep: its final commit handed the slot over.
    engine.run_turn("c1-a")
    assert Run.objects.get(id="c1-b").status == RunStatus.PENDING


def test_limit_two_admits_two_at_a_time():
    for n in "abcd":
        start(s_pair, n)
    drive()
    assert list(statuses("s_pair").values()) == ["suspended", "suspended", "queued", "queued"]
    durable.signal("c1-b", "go")
    drive()
    assert list(statuses("s_pair").values()) == ["suspended", "completed", "pending", "queued"]


def test_queue_full_is_raised_before_anything_is_written():
    for n in "abc":
        start(s_quota, n)
    before = (Run.objects.count(), list(SingletonSlot.objects.values_list("tail", flat=True)))
    with pytest.raises(durable.QueueFull) as info:
        start(s_quota, "d")
    err = info.value
    assert (err.workflow, err.key, err.limit, err.max_queue_depth) == ("s_quota", "c1", 1, 2)
    assert "s_quota" in str(err) and "'c1'" in str(err)
    assert (Run.objects.count(), list(SingletonSlot.objects.values_list("tail", flat=True))) == before
    start(s_quota, "z", customer="c2")  # another key has room
    # A start with the id of a waiting run is idempotent, even with the queue full.
    assert start(s_quota, "c") == "c1-c"
    assert Run.objects.count() == before[0] + 1


def test_max_queue_depth_zero_refuses_every_start_beyond_the_limit():
    start(s_strict, "a")
    with pytest.raises(durable.QueueFull):
        start(s_strict, "b")
    assert not Run.objects.filter(id="c1-b").exists()
    durable.signal("c1-a", "go")
    run_until_settled("c1-a")
    start(s_strict, "b")  # the slot is free again
    assert Run.objects.get(id="c1-b").status == RunStatus.PENDING


def test_cancelling_the_running_run_admits_the_next_at_once():
    start(s_sync, "a")
    start(s_sync, "b")
    start(s_sync, "c")
    drive()
    assert durable.cancel("c1-a")
    assert Run.objects.get(id="c1-b").status == RunStatus.PENDING
    assert durable.cancel("c1-c")  # a queued run is cancelled outright, freeing nothing
    assert statuses("s_sync") == {"c1-a": "cancelled", "c1-b": "pending", "c1-c": "cancelled"}


def test_a_failed_run_frees_its_slot():
    durable.start(s_boom, {"customer": "c1", "n": "a", "fail": True}, run_id="c1-a")
    start(s_boom, "b")
    assert Run.objects.get(id="c1-b").status == RunStatus.QUEUED
    assert run_until_settled("c1-a").status == RunStatus.FAILED
    assert run_until_settled("c1-b").status == RunStatus.COMPLETED


def test_a_run_that_dies_frees_its_slot():
    with fake_clock() as clock:
        start(s_sync, "a")
        start(s_sync, "b")
        engine = get_engine()
        now = clock.now()
        # A worker took the first run's turn and died: its lease lapses, and it is past its recoveries.
        assert engine.store.acquire("c1-a", "gone-worker", now, now + timedelta(seconds=30)) is not None
        Run.objects.filter(id="c1-a").update(recovery_attempts=engine.settings.max_recovery_attempts)
        clock.advance("31s")
        counts = drive()
        assert counts["dead"] == 1
        assert Run.objects.get(id="c1-a").status == RunStatus.DEAD
        assert Run.objects.get(id="c1-b").status != RunStatus.QUEUED  # admitted right after the dead write
        assert counts["admitted"] == 0  # not by the sweep: the write that killed it handed the slot over


def test_a_missing_key_is_refused_with_a_clear_error():
    with pytest.raises(durable.InvalidInput, match="singleton on input field 'customer'"):
        durable.start(s_sync, {"n": "a"})
    assert not Run.objects.exists()


def test_the_sweep_admits_runs_whose_slot_was_freed_without_a_hand_over():
    start(s_sync, "a")
    start(s_sync, "b")
    drive()
    # A slot freed by a write that handed nothing over (as a crash between two writes would leave it).
    Run.objects.filter(id="c1-a").update(status=RunStatus.COMPLETED)
    with fake_clock():
        counts = drive()
    assert counts["admitted"] == 1
    assert Run.objects.get(id="c1-b").status == RunStatus.SUSPENDED


def test_signal_with_start_of_a_singleton_queues_with_its_signal_or_refuses_past_the_depth():
    start(s_strict, "a")
    with pytest.raises(durable.QueueFull):
        durable.signal_with_start(s_strict, "c1-b", "go", input={"customer": "c1", "n": "b"})
    assert not Run.objects.filter(id="c1-b").exists()
    start(s_sync, "a", customer="c2")
    durable.signal_with_start(s_sync, "c2-b", "go", input={"customer": "c2", "n": "b"})
    assert Run.objects.get(id="c2-b").status == RunStatus.QUEUED
    durable.signal("c2-a", "go")
    run_until_settled("c2-a")
    assert run_until_settled("c2-b").status == RunStatus.COMPLETED  # its buffered signal waited with it


def test_a_queued_run_says_what_it_waits_for_in_get_run_and_durable_run():
    start(s_sync, "a")
    start(s_sync, "b")
    info = durable.get_run("c1-b")
    assert (info.status, info.singleton_key) == ("queued", "c1")
    out = StringIO()
    call_command("durable_run", "c1-b", stdout=out)
    text = out.getvalue()
    assert "queued" in text and "key c1" in text and "waiting for singleton key 'c1'" in text


@durable.workflow(name="s_timed", singleton=durable.Singleton(key="customer"), timeout="1h")
def s_timed(ctx: Any, data: dict[str, Any]) -> str:
    ctx.wait_signal("go")
    return data["n"]


def test_a_queued_run_past_its_execution_timeout_fails_at_once_without_starting():
    with fake_clock() as clock:
        start(s_timed, "a")
        start(s_timed, "b")
        drive()
        clock.advance("61m")
        drive()
        drive()
    waited = Run.objects.get(id="c1-b")
    assert (waited.status, waited.error["code"], waited.started_at) == ("failed", "timeout", None)
    assert Run.objects.get(id="c1-a").status == RunStatus.FAILED  # its own turn stopped it
