"""Store contract: complete_callback and resume_breakpoint (writes made from outside a run, under its row lock)."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.plan_external import BreakpointPlan, plan_callback
from durable.engine.ports import Waiter
from durable.engine.vocab import CALLBACK_TOKEN, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import BreakpointNotFound, CallbackAlreadyCompleted, CallbackNotFound, RunNotFound
from tests.store.conftest import at, finish, record, running, suspend, suspended

PENDING = CheckpointStatus.PENDING


def callback_run(store: Any, run_id: str = "r1", *, deadline: Any = None, waiting: bool = False) -> None:
    """A suspended run with a pending callback at 1 (and, ``waiting``, a wait on it at 2 with its waiter)."""
    records = [record(1, CheckpointKind.CALLBACK, PENDING, name="approval", wake_at=deadline)]
    waiters = []
    if waiting:
        records.append(record(2, CheckpointKind.CALLBACK_WAIT, PENDING, name="approval"))
        waiters.append(Waiter(CALLBACK_TOKEN + "tok", 2))
    suspended(store, run_id, *records, waiters=waiters, wake_at=at(300))


def test_a_completion_settles_the_callback_and_buffers_its_payload(store: Any, probe: Any) -> None:
    callback_run(store)
    assert store.complete_callback(plan_callback("r1", 1, "tok", at(5), payload={"ok": 1})) is False  # nobody waits
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output, cp.error, cp.finished_at) == ("completed", {"ok": 1}, None, at(5))
    assert probe.signals("r1") == [(CALLBACK_TOKEN + "tok", {"payload": {"ok": 1}})]
    assert store.get_run("r1").wake_at == at(300)


def test_a_completion_wakes_a_run_waiting_on_it(store: Any) -> None:
    callback_run(store, waiting=True)
    assert store.complete_callback(plan_callback("r1", 1, "tok", at(5), payload=2)) is True
    assert store.get_run("r1").wake_at == at(5)


def test_a_failure_records_the_error(store: Any, probe: Any) -> None:
    callback_run(store)
    store.complete_callback(plan_callback("r1", 1, "tok", at(5), error={"message": "no"}))
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output, cp.error) == ("failed", None, {"message": "no"})
    assert probe.signals("r1") == [(CALLBACK_TOKEN + "tok", {"error": {"message": "no"}})]


def test_only_the_first_completion_is_written(store: Any, probe: Any) -> None:
    callback_run(store)
    store.complete_callback(plan_callback("r1", 1, "tok", at(5), payload=1))
    with pytest.raises(CallbackAlreadyCompleted, match="already completed"):
        store.complete_callback(plan_callback("r1", 1, "tok", at(6), payload=2))
    with pytest.raises(CallbackAlreadyCompleted, match="already completed"):
        store.complete_callback(plan_callback("r1", 1, "tok", at(6), error={"message": "x"}))
    assert store.load_checkpoints("r1")[1].output == 1
    assert len(probe.signals("r1")) == 1


def test_a_completion_at_or_after_the_deadline_is_refused(store: Any, probe: Any) -> None:
    callback_run(store, deadline=at(60))
    with pytest.raises(CallbackAlreadyCompleted, match="timed out"):
        store.complete_callback(plan_callback("r1", 1, "tok", at(60), payload=1))
    assert store.load_checkpoints("r1")[1].status == PENDING and probe.signals("r1") == []
    assert store.complete_callback(plan_callback("r1", 1, "tok", at(59), payload=1)) is False


def test_a_completion_for_no_callback_or_an_ended_run_is_refused(store: Any, probe: Any) -> None:
    with pytest.raises(CallbackNotFound, match="no such run"):
        store.complete_callback(plan_callback("nope", 1, "tok", at(5)))
    callback_run(store)
    for seq in (2, 9):
        with pytest.raises(CallbackNotFound, match="no callback at that position"):
            store.complete_callback(plan_callback("r1", seq, "tok", at(5)))
    running(store, "r2")
    suspend(store, "r2", record(1, CheckpointKind.LOCAL), record(2, CheckpointKind.CALLBACK, PENDING))
    with pytest.raises(CallbackNotFound):
        store.complete_callback(plan_callback("r2", 1, "tok", at(5)))  # a local step, not a callback
    store.acquire("r2", "owner-a", at(400), at(430))
    finish(store, "r2", RunStatus.COMPLETED, now=at(401))
    with pytest.raises(CallbackAlreadyCompleted, match="the run has ended"):
        store.complete_callback(plan_callback("r2", 2, "tok", at(402)))
    assert probe.signals("r2") == []


def test_resume_breakpoint_settles_the_newest_pending_breakpoint_and_wakes_the_run(store: Any) -> None:
    suspended(
        store,
        "r1",
        record(1, CheckpointKind.BREAKPOINT, name="first"),
        record(2, CheckpointKind.BREAKPOINT, PENDING, name="second"),
        wake_at=at(300),
    )
    assert store.resume_breakpoint(BreakpointPlan("r1", at(7))) == "second"
    cp = store.load_checkpoints("r1")[2]
    assert (cp.status, cp.finished_at) == ("completed", at(7))
    assert store.get_run("r1").wake_at == at(7)
    with pytest.raises(BreakpointNotFound, match="not paused at a breakpoint"):
        store.resume_breakpoint(BreakpointPlan("r1", at(8)))


def test_resume_breakpoint_refuses_unknown_unpaused_and_ended_runs(store: Any) -> None:
    with pytest.raises(RunNotFound):
        store.resume_breakpoint(BreakpointPlan("nope", at(1)))
    suspended(store, "r1", record(1, CheckpointKind.SIGNAL, PENDING, name="go"))
    with pytest.raises(BreakpointNotFound):
        store.resume_breakpoint(BreakpointPlan("r1", at(1)))
    running(store, "r2")
    suspend(store, "r2", record(1, CheckpointKind.BREAKPOINT, PENDING, name="bp"))
    store.cancel("r2", at(2))
    with pytest.raises(BreakpointNotFound, match="cancelled"):
        store.resume_breakpoint(BreakpointPlan("r2", at(3)))
    assert store.load_checkpoints("r2")[1].status == PENDING
