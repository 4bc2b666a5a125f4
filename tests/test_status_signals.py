"""Every status a run can reach is announced by its Django signal once, after the write committed.

One test per path to each status: a turn's outcome, a direct cancel, a
cancel cascading to children, fail-fast siblings, the timeout sweep, the
orphan sweep, a turn that keeps failing, a run of an unregistered workflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

import durable
from durable import runtime, signals
from durable.models import Run
from durable.runtime import get_engine
from durable.testing import drive, fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

Seen = list[tuple[str, str, str, str]]


@pytest.fixture
def seen() -> Iterator[Seen]:
    """Every status signal sent during the test: (signal status, sender, run id, run status)."""
    got: Seen = []
    receivers = []
    for status, signal in signals.BY_STATUS.items():

        def receiver(sender: str, run: Any, _status: str = status, **kwargs: Any) -> None:
            got.append((_status, sender, run.id, run.status))

        signal.connect(receiver, weak=False)
        receivers.append((signal, receiver))
    yield got
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def only(seen: Seen, status: str) -> Seen:
    return [entry for entry in seen if entry[0] == status]


@durable.workflow(name="sig_done")
def sig_done(ctx, x):
    return x + 1


@durable.workflow(name="sig_fails")
def sig_fails(ctx):
    raise ValueError("no")


@durable.workflow(name="sig_waits")
def sig_waits(ctx):
    return ctx.wait_signal("go")


@durable.workflow(name="sig_sleeper")
def sig_sleeper(ctx, x=None):
    ctx.sleep("1d")
    return x


@durable.workflow(name="sig_parent")
def sig_parent(ctx):
    return ctx.child(sig_sleeper, 1)


@durable.workflow(name="sig_bad_child")
def sig_bad_child(ctx):
    return ctx.child("sig_no_such_workflow")


@durable.step
def sig_boom(x: int) -> int:
    raise durable.FatalError(f"boom {x}")


@durable.workflow(name="sig_fanout")
def sig_fanout(ctx):
    return ctx.gather(durable.call(sig_boom, 1), durable.child_call(sig_sleeper, 2), mode="fail_fast")


@durable.workflow(name="sig_timed", timeout="1h")
def sig_timed(ctx):
    ctx.sleep("1d")


# -- turns -----------------------------------------------------------------------


def test_completed_once(seen):
    run_id = durable.start(sig_done, 1)
    run_until_settled(run_id)
    assert seen == [("completed", "sig_done", run_id, "completed")]


def test_failed_by_a_turn_once(seen):
    run_id = durable.start(sig_fails)
    run_until_settled(run_id)
    assert seen == [("failed", "sig_fails", run_id, "failed")]


def test_suspended_once_per_suspension(seen):
    run_id = durable.start(sig_waits)
    drive()
    drive()
    assert seen == [("suspended", "sig_waits", run_id, "suspended")]


def test_failed_when_a_child_cannot_start(seen):
    run_id = durable.start(sig_bad_child)
    run_until_settled(run_id)
    assert seen == [("failed", "sig_bad_child", run_id, "failed")]


def test_blocked_when_the_workflow_is_not_registered(seen):
    run_id = durable.start(sig_done, 1)
    Run.objects.filter(id=run_id).update(workflow="sig_unregistered")
    drive()
    drive()
    assert seen == [("blocked", "sig_unregistered", run_id, "blocked")]


# -- cancel ----------------------------------------------------------------------


def test_direct_cancel_once_and_only_after_commit(seen, django_capture_on_commit_callbacks):
    run_id = durable.start(sig_waits)
    drive()
    seen.clear()
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            assert durable.cancel(run_id) is True
            assert seen == []  # not before the cancel committed
    assert durable.cancel(run_id) is False
    assert seen == [("cancelled", "sig_waits", run_id, "cancelled")]


def test_cancel_cascades_to_children_once_each(seen, django_capture_on_commit_callbacks):
    with fake_clock():
        run_id = durable.start(sig_parent)
        drive()
        drive()
        child = Run.objects.get(parent_id=run_id).id
        seen.clear()
        with django_capture_on_commit_callbacks(execute=True):
            durable.cancel(run_id)
        drive()
    assert sorted(only(seen, "cancelled")) == [
        ("cancelled", "sig_parent", run_id, "cancelled"),
        ("cancelled", "sig_sleeper", child, "cancelled"),
    ]
    assert seen == only(seen, "cancelled")


def test_cancel_with_undo_once(seen, django_capture_on_commit_callbacks):
    run_id = durable.start(sig_waits)
    drive()
    seen.clear()
    with django_capture_on_commit_callbacks(execute=True):
        durable.cancel(run_id, compensate=True)
    run_until_settled(run_id)
    assert seen == [("cancelled", "sig_waits", run_id, "cancelled")]


def test_fail_fast_cancels_siblings_once(seen):
    with fake_clock():
        run_id = durable.start(sig_fanout)
        run_until_settled(run_id)
        drive()
    child = Run.objects.get(parent_id=run_id).id
    assert only(seen, "cancelled") == [("cancelled", "sig_sleeper", child, "cancelled")]
    assert only(seen, "failed") == [("failed", "sig_fanout", run_id, "failed")]


# -- sweeps ----------------------------------------------------------------------


def test_dead_by_the_orphan_sweep_once(seen):
    run_id = durable.start(sig_done, 1)
    Run.objects.filter(id=run_id).update(
        status="running", locked_by="gone", locked_until=runtime.now() - timedelta(seconds=1), recovery_attempts=5
    )
    drive()
    drive()
    assert durable.get_run(run_id).status == "dead"
    assert seen == [("dead", "sig_done", run_id, "dead")]


def test_dead_after_a_turn_keeps_failing_once(seen, monkeypatch):
    run_id = durable.start(sig_waits)
    drive()
    seen.clear()
    Run.objects.filter(id=run_id).update(recovery_attempts=get_engine().settings.max_recovery_attempts)
    store = get_engine().store

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the database went away")

    # Both history reads: the whole history, and the changes since (the process's history cache).
    monkeypatch.setattr(store, "load_checkpoints", broken)
    monkeypatch.setattr(store, "load_delta", broken)
    durable.signal(run_id, "go")
    get_engine().run_turn(run_id)
    monkeypatch.undo()
    drive()
    assert durable.get_run(run_id).status == "dead"
    assert seen == [("dead", "sig_waits", run_id, "dead")]


def test_failed_by_the_timeout_sweep_of_a_blocked_run_once(seen):
    with fake_clock() as clock:
        run_id = durable.start(sig_timed)
        Run.objects.filter(id=run_id).update(workflow="sig_unregistered_timed")
        drive()
        seen.clear()
        clock.advance(timedelta(hours=2))
        drive()
        drive()
    assert durable.get_run(run_id).status == "failed"
    assert seen == [("failed", "sig_unregistered_timed", run_id, "failed")]


def test_failed_by_the_timeout_of_a_suspended_run_once(seen):
    with fake_clock() as clock:
        run_id = durable.start(sig_timed)
        drive()
        seen.clear()
        clock.advance(timedelta(hours=2))
        drive()
        drive()
    assert durable.get_run(run_id).status == "failed"
    assert seen == [("failed", "sig_timed", run_id, "failed")]


def test_cancelled_by_a_schedules_cancel_other_once(seen):
    from tests.test_schedules import T0, runs_of

    with fake_clock(T0) as clock:
        durable.create_schedule("sig-cancel", "sched.held", every="1m", overlap="cancel_other")
        drive()
        clock.advance(timedelta(minutes=1))
        seen.clear()
        drive()
    first, second = runs_of("sig-cancel")
    assert (first.status, second.status) == ("cancelled", "suspended")
    assert only(seen, "cancelled") == [("cancelled", "sched.held", first.id, "cancelled")]
