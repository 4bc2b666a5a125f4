"""Store contract: edge cases the engine learned the hard way (see DESIGN.md, "Edge cases")."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.ports import CancelResult, CheckpointWrite, Outcome, TurnWrites, Waiter
from durable.engine.vocab import EVENT_TOKEN, RUN_TOKEN, CheckpointKind, CheckpointStatus, RunStatus
from tests.store.conftest import (
    LEASE,
    OTHER,
    OWNER,
    T0,
    at,
    creates,
    fields,
    finish,
    record,
    running,
    step,
    suspended,
    written,
)

ERROR = {"message": "no", "code": "x", "retryable": False, "type": "E", "traceback": None}


def test_a_waiter_is_removed_for_its_own_run_only(store: Any, probe: Any) -> None:
    store.create_run(fields("x"))
    suspended(store, "w1", wake_at=at(10), waiters=[Waiter(RUN_TOKEN + "x", 1)])
    suspended(store, "w2", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "x", 1)])
    assert store.acquire("w1", OWNER, at(10), at(40))
    done = Outcome(RunStatus.COMPLETED, had_waiters=True)
    assert written(store.commit("w1", OWNER, at(11), at(41), TurnWrites(), done))
    assert (probe.waiters("w1"), probe.waiters("w2")) == ([], [(RUN_TOKEN + "x", 1, None)])
    assert store.notify_settled("x", at(12)) == ["w2"]


def test_publish_skips_a_waiter_whose_checkpoint_settled_meanwhile(store: Any, probe: Any) -> None:
    cp = record(1, CheckpointKind.EVENT, CheckpointStatus.PENDING, name="paid")
    suspended(store, "r1", cp, wake_at=at(300), waiters=[Waiter(EVENT_TOKEN + "paid", 1)])
    assert store.acquire("r1", OWNER, at(300), at(330))
    timed_out = record(1, CheckpointKind.EVENT, CheckpointStatus.FAILED, name="paid", error=ERROR)
    writes = TurnWrites(checkpoints=[CheckpointWrite(timed_out, create=False, expect=("pending",))])
    assert written(store.commit("r1", OWNER, at(300), at(330), writes))  # a flush: the waiter stays until the turn ends
    got = store.publish_event("paid", "late", "ev-1", at(301))
    assert got == {"duplicate": False, "delivered": [], "buffered": True}
    assert store.load_checkpoints("r1")[1].status == "failed"
    assert probe.events() == [("ev-1", "paid", "late", False)]


def test_release_after_a_cancel_never_dead_letters(store: Any) -> None:
    running(store, "r1")
    store.cancel("r1", at(1))
    assert store.release("r1", OWNER, at(2), at(3), True, 0) is None
    run = store.get_run("r1")
    assert (run.status, run.recovery_attempts, run.error) == ("cancelled", 0, None)


def test_cancel_with_compensation_of_a_running_run_marks_it_without_a_wake(store: Any) -> None:
    running(store, "r1")
    assert store.cancel("r1", at(5), compensate=True) == CancelResult(True, ("r1",))
    run = store.get_run("r1")
    assert (run.status, run.cancel_requested, run.wake_at, run.locked_by) == ("running", True, None, OWNER)
    assert store.lease_held("r1", OWNER) is True


def test_an_unclaimed_update_settles_a_step_in_flight_elsewhere(store: Any, probe: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1)))
    store.claim_step("r1", 1, OTHER, at(1), at(61))
    stopped = step(1, CheckpointStatus.FAILED, error=ERROR, finished_at=at(2))
    writes = TurnWrites(checkpoints=[CheckpointWrite(stopped, create=False, expect=("pending", "running"))])
    assert written(store.commit("r1", OWNER, at(2), at(32), writes))
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.error, cp.locked_by, cp.attempts) == ("failed", ERROR, None, 1)
    assert store.finish_step("r1", 1, at(3), output="too late") is False
    assert store.load_checkpoints("r1")[1].status == "failed"  # a settled one wins


def test_create_run_refuses_columns_a_run_does_not_have(store: Any) -> None:
    with pytest.raises(TypeError):
        store.create_run(fields("r1", colour="blue"))
    assert store.get_run("r1") is None


def test_requeue_clears_a_timeout_request(store: Any) -> None:
    running(store, "r1", deadline_at=at(10))
    assert store.request_timeout("r1", at(11), ERROR)
    finish(store, "r1", RunStatus.FAILED, now=at(12), error=ERROR)
    assert store.get_run("r1").cancel_requested is True
    store.requeue("r1", at(13), at(100))
    run = store.get_run("r1")
    assert (run.status, run.cancel_requested, run.error, run.deadline_at) == ("pending", False, None, at(100))
    assert store.overdue_runs(at(50), 10) == []
