"""Store contract: creating runs, leases, blocking, cancellation, repairs and reads."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.ports import CancelResult, Outcome, TurnWrites, Waiter
from durable.engine.vocab import RUN_TOKEN, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidRunState, RunNotFound
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
    suspend,
    suspended,
    written,
)

FAILED_STEP = {"message": "boom", "code": "step_failed", "retryable": False, "type": "StepFailed", "traceback": None}


def test_create_run_is_idempotent_on_id_and_fills_the_defaults(store: Any) -> None:
    assert store.create_run(fields("r1", input={"a": [1, 2]}, tags=["t"])) is True
    assert store.create_run(fields("r1", input={"a": "other"})) is False
    run = store.get_run("r1")
    assert (run.id, run.workflow, run.version, run.status, run.namespace) == ("r1", "wf", 1, "pending", "default")
    assert (run.input, run.tags, run.search_attributes, run.priority) == ({"a": [1, 2]}, ["t"], {}, 0)
    assert (run.output, run.error, run.wake_at, run.locked_by, run.locked_until) == (None, None, None, None, None)
    assert (run.recovery_attempts, run.turns, run.query_values, run.patches) == (0, 0, {}, [])
    assert (run.parent_id, run.retry_of, run.continued_to, run.cancel_requested) == (None, None, None, False)
    assert (run.lifecycle, run.lifecycle_owed, run.deadline_at) == ({}, False, None)
    assert (run.created_at, run.updated_at, run.started_at, run.finished_at) == (T0, T0, None, None)


def test_get_run_of_an_unknown_id_is_none(store: Any) -> None:
    assert store.get_run("nope") is None


def test_records_are_copies_not_views_of_the_stored_run(store: Any) -> None:
    store.create_run(fields("r1", tags=["a"]))
    run = store.get_run("r1")
    run.tags.append("b")
    run.input["x"] = 99
    again = store.get_run("r1")
    assert (again.tags, again.input) == (["a"], {"x": 1})


def test_create_leased_run_starts_running_under_the_lease(store: Any) -> None:
    run = store.create_leased_run(fields("r1"), OWNER, at(1), LEASE)
    assert (run.status, run.locked_by, run.locked_until, run.turns) == ("running", OWNER, LEASE, 1)
    assert (run.started_at, run.updated_at) == (at(1), at(1))
    assert store.create_leased_run(fields("r1"), OTHER, at(2), LEASE) is None
    stored = store.get_run("r1")
    assert (stored.status, stored.locked_by, stored.turns, stored.started_at) == ("running", OWNER, 1, at(1))
    assert store.lease_held("r1", OWNER) is True


def test_a_leased_runs_record_is_the_run_as_stored(store: Any) -> None:
    # The record is built from the inserted columns and the model's defaults, not read back.
    run = store.create_leased_run(fields("r1", input={"a": 1}, tags=["t"], priority=3), OWNER, at(1), LEASE)
    assert run == store.get_run("r1")
    run.query_values["x"] = 1  # a default is the record's own, not shared with the next run
    assert store.create_leased_run(fields("r2"), OWNER, at(1), LEASE).query_values == {}


def test_acquire_takes_a_pending_run_once(store: Any) -> None:
    store.create_run(fields("r1"))
    run = store.acquire("r1", OWNER, at(1), LEASE)
    assert (run.status, run.locked_by, run.locked_until, run.turns) == ("running", OWNER, LEASE, 1)
    assert (run.started_at, run.updated_at) == (at(1), at(1))
    assert store.acquire("r1", OTHER, at(2), at(40)) is None
    assert store.get_run("r1").locked_by == OWNER


def test_acquire_takes_a_suspended_run_only_once_its_wake_is_due(store: Any) -> None:
    suspended(store, "r1", wake_at=at(100))
    assert store.acquire("r1", OWNER, at(99), at(130)) is None
    run = store.acquire("r1", OTHER, at(100), at(130))
    assert (run.status, run.locked_by, run.turns) == ("running", OTHER, 2)
    assert run.started_at == T0  # the first turn's, kept


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.BLOCKED])
def test_acquire_refuses_settled_and_blocked_runs(store: Any, status: str) -> None:
    running(store, "r1")
    if status == RunStatus.BLOCKED:
        assert store.block("r1", OWNER, at(1), {"code": "x"})
    else:
        finish(store, "r1")
    assert store.acquire("r1", OWNER, at(1000), at(1030)) is None
    assert store.get_run("r1").status == status


def test_acquire_of_an_unknown_run_is_none(store: Any) -> None:
    assert store.acquire("nope", OWNER, T0, LEASE) is None


def test_renew_lease_only_by_the_holder_of_a_running_run(store: Any) -> None:
    running(store, "r1")
    assert store.renew_lease("r1", OTHER, at(5), at(90)) is False
    assert store.get_run("r1").locked_until == at(30)
    assert store.renew_lease("r1", OWNER, at(5), at(35)) is True
    assert store.get_run("r1").locked_until == at(35)
    suspend(store, "r1")
    assert store.renew_lease("r1", OWNER, at(6), at(36)) is False
    assert store.get_run("r1").locked_until is None


def test_lease_held_is_true_only_for_the_holder_while_running(store: Any) -> None:
    running(store, "r1")
    assert store.lease_held("r1", OWNER) is True
    assert store.lease_held("r1", OTHER) is False
    assert store.lease_held("nope", OWNER) is False
    store.cancel("r1", at(1))
    assert store.lease_held("r1", OWNER) is False


def test_release_hands_the_run_back_suspended_and_due(store: Any) -> None:
    running(store, "r1")
    assert store.release("r1", OWNER, at(2), at(7), False) == "suspended"
    run = store.get_run("r1")
    assert (run.status, run.wake_at, run.locked_by, run.locked_until) == ("suspended", at(7), None, None)
    assert (run.updated_at, run.recovery_attempts) == (at(2), 0)


def test_release_by_someone_else_writes_nothing(store: Any) -> None:
    running(store, "r1")
    assert store.release("r1", OTHER, at(2), at(7), True, 0) is None
    run = store.get_run("r1")
    assert (run.status, run.locked_by, run.recovery_attempts, run.wake_at) == ("running", OWNER, 0, None)


def test_release_counts_recoveries_and_dead_letters_past_the_maximum(store: Any) -> None:
    running(store, "r1")
    assert store.release("r1", OWNER, at(1), at(2), True, 2) == "suspended"
    assert store.acquire("r1", OWNER, at(2), at(32))
    assert store.release("r1", OWNER, at(3), at(4), True, 2) == "suspended"
    assert store.get_run("r1").recovery_attempts == 2
    assert store.acquire("r1", OWNER, at(4), at(34))
    assert store.release("r1", OWNER, at(5), at(6), True, 2) == "dead"
    run = store.get_run("r1")
    assert (run.status, run.recovery_attempts, run.finished_at, run.updated_at) == ("dead", 3, at(5), at(5))
    assert (run.wake_at, run.locked_by, run.locked_until) == (None, None, None)
    assert run.error == {
        "message": "the run's turn failed 3 times in a row; giving up",
        "code": "max_recovery_attempts",
        "retryable": False,
        "type": "Dead",
        "traceback": None,
    }


def test_release_without_counting_never_dead_letters(store: Any) -> None:
    running(store, "r1")
    assert store.release("r1", OWNER, at(1), at(1), False, 0) == "suspended"
    assert store.get_run("r1").recovery_attempts == 0


def test_block_parks_a_held_run_with_its_reason(store: Any) -> None:
    running(store, "r1")
    reason = {"code": "workflow_not_registered", "message": "wf v1"}
    assert store.block("r1", OTHER, at(1), reason) is False
    assert store.block("r1", OWNER, at(1), reason) is True
    run = store.get_run("r1")
    assert (run.status, run.error, run.locked_by, run.locked_until, run.updated_at) == (
        "blocked",
        reason,
        None,
        None,
        at(1),
    )


def test_unblock_returns_only_blocked_runs_to_pending(store: Any) -> None:
    running(store, "b1")
    store.block("b1", OWNER, at(1), {"code": "x"})
    running(store, "r2")
    assert store.unblock(["b1", "r2", "nope"], at(2)) == 1
    run = store.get_run("b1")
    assert (run.status, run.error, run.updated_at) == ("pending", None, at(2))
    assert store.get_run("r2").status == "running"


def test_resolve_run_follows_continue_as_new_and_successful_retries(store: Any) -> None:
    running(store, "c")
    _, _ = finish(store, "c", next_run=fields("c~1"), output={"continued_as": "c~1"})
    assert store.get_run("c").continued_to == "c~1"
    assert store.resolve_run("c").id == "c~1"
    running(store, "f")
    finish(store, "f", RunStatus.FAILED, error=FAILED_STEP)
    assert store.resolve_run("f").id == "f"
    running(store, "f~retry~1", retry_of="f")
    finish(store, "f~retry~1", output=7)
    resolved = store.resolve_run("f")
    assert (resolved.id, resolved.output) == ("f~retry~1", 7)
    assert store.resolve_run("nope") is None


def _failed_with(store: Any, run_id: str, *records: Any, status: str = RunStatus.FAILED) -> None:
    running(store, run_id, deadline_at=at(50))
    outcome = Outcome(status, error=FAILED_STEP, had_waiters=False)
    assert written(store.commit(run_id, OWNER, at(1), at(31), creates(*records), outcome))


def test_requeue_drops_history_from_the_first_failed_step_and_resets_the_run(store: Any) -> None:
    _failed_with(
        store,
        "r1",
        record(1, CheckpointKind.LOCAL, output=1),
        record(2, CheckpointKind.SLEEP, CheckpointStatus.FAILED),  # not resettable: kept
        step(3, CheckpointStatus.FAILED, error=FAILED_STEP),
        record(4, CheckpointKind.NOW, output="x"),
    )
    assert store.requeue("r1", at(10), at(99)) == ["r1"]
    assert sorted(store.load_checkpoints("r1")) == [1, 2]
    run = store.get_run("r1")
    assert (run.status, run.error, run.output, run.finished_at, run.wake_at) == ("pending", None, None, None, None)
    assert (run.locked_by, run.recovery_attempts, run.cancel_requested) == (None, 0, False)
    assert (run.updated_at, run.deadline_at) == (at(10), at(99))


def test_requeue_of_a_dead_run_resets_its_recovery_count(store: Any) -> None:
    running(store, "r1")
    store.release("r1", OWNER, at(1), at(1), True, 0)
    assert store.get_run("r1").status == "dead"
    assert store.requeue("r1", at(2), None) == ["r1"]
    run = store.get_run("r1")
    assert (run.status, run.recovery_attempts, run.deadline_at) == ("pending", 0, None)


def test_requeue_cascades_to_failed_children_the_run_awaited(store: Any) -> None:
    _failed_with(store, "kid", step(1, CheckpointStatus.FAILED, error=FAILED_STEP))
    _failed_with(
        store,
        "dad",
        record(1, CheckpointKind.CHILD, CheckpointStatus.FAILED, input={"run_id": "kid"}, error=FAILED_STEP),
    )
    assert store.requeue("dad", at(5), None) == ["dad", "kid"]
    assert (store.get_run("kid").status, store.load_checkpoints("kid")) == ("pending", {})
    assert store.get_run("kid").deadline_at == at(50)  # only the requeued run's own deadline is replaced


def test_requeue_keeps_a_late_success_that_landed_after_the_failure(store: Any) -> None:
    running(store, "r1")
    assert written(store.commit("r1", OWNER, T0, LEASE, creates(step(1))))
    finish(store, "r1", RunStatus.FAILED, error=FAILED_STEP)
    assert store.finish_step("r1", 1, at(3), output="late") is False
    assert store.get_run("r1").status == "failed"
    store.requeue("r1", at(4), None)
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output) == ("completed", "late")


def test_requeue_refuses_runs_that_are_not_failed_or_dead(store: Any) -> None:
    running(store, "r1")
    finish(store, "r1")
    with pytest.raises(InvalidRunState):
        store.requeue("r1", at(1), None)
    with pytest.raises(RunNotFound):
        store.requeue("nope", at(1), None)
    assert store.get_run("r1").status == "completed"


def test_pending_steps_marks_every_pending_step_for_redispatch(store: Any, probe: Any) -> None:
    suspended(
        store,
        "r1",
        step(1, queue="q1", retry_at=at(500), wake_at=at(60)),
        step(2, CheckpointStatus.COMPLETED, output=2),
        step(3),
        record(4, CheckpointKind.SLEEP, CheckpointStatus.PENDING, wake_at=at(80)),
    )
    assert store.pending_steps("r1", at(5), at(65)) == [(1, "q1"), (3, None)]
    cps = store.load_checkpoints("r1")
    assert [(cps[s].wake_at, cps[s].retry_at) for s in (1, 3)] == [(at(65), None), (at(65), None)]
    assert (probe.step("r1", 1)["dispatches"], probe.step("r1", 2)["dispatches"]) == (1, 0)
    assert cps[4].wake_at == at(80)


def test_pending_steps_refuses_unknown_and_settled_runs(store: Any) -> None:
    running(store, "r1")
    finish(store, "r1")
    with pytest.raises(InvalidRunState):
        store.pending_steps("r1", at(1), at(2))
    with pytest.raises(RunNotFound):
        store.pending_steps("nope", at(1), at(2))


def test_cancel_stops_a_run_and_its_active_descendants(store: Any, probe: Any) -> None:
    suspended(store, "root", waiters=[Waiter("go", 1)])
    store.create_run(fields("kid", parent_id="root"))
    store.create_run(fields("grandkid", parent_id="kid"))
    running(store, "done", parent_id="root")
    finish(store, "done")
    store.create_run(fields("stranger"))
    result = store.cancel("root", at(9))
    assert (result.done, result.woken, sorted(result.cancelled)) == (True, (), ["grandkid", "kid", "root"])
    for run_id in ("root", "kid", "grandkid"):
        run = store.get_run(run_id)
        assert (run.status, run.finished_at, run.updated_at, run.wake_at, run.locked_by) == (
            "cancelled",
            at(9),
            at(9),
            None,
            None,
        )
    assert (store.get_run("done").status, store.get_run("stranger").status) == ("completed", "pending")
    assert probe.waiters("root") == []


def test_cancel_wakes_the_runs_waiting_on_a_cancelled_run(store: Any) -> None:
    store.create_run(fields("kid"))
    suspended(store, "parent", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "kid", 1)])
    assert store.cancel("kid", at(4)) == CancelResult(True, ("parent",), ("kid",))
    assert store.get_run("parent").wake_at == at(4)


def test_cancel_of_a_settled_or_unknown_run(store: Any) -> None:
    running(store, "r1")
    finish(store, "r1")
    assert store.cancel("r1", at(2)) == CancelResult(False)
    assert store.get_run("r1").status == "completed"
    with pytest.raises(RunNotFound):
        store.cancel("nope", at(2))


def test_a_status_write_over_a_cancel_is_refused(store: Any) -> None:
    running(store, "r1")
    store.cancel("r1", at(1))
    result, _ = finish(store, "r1", output="late")
    assert written(result) is False
    run = store.get_run("r1")
    assert (run.status, run.output, run.finished_at) == ("cancelled", None, at(1))


def test_cancel_with_compensation_marks_and_wakes_the_tree(store: Any) -> None:
    suspended(store, "root", wake_at=at(300))
    store.create_run(fields("kid", parent_id="root"))
    running(store, "blocked-kid", parent_id="root")
    store.block("blocked-kid", OWNER, at(1), {"code": "x"})
    result = store.cancel("root", at(5), compensate=True)
    assert (result.done, sorted(result.woken), result.cancelled) == (
        True,
        ["blocked-kid", "kid", "root"],
        ("blocked-kid",),
    )
    root, kid, blocked = (store.get_run(r) for r in ("root", "kid", "blocked-kid"))
    assert (root.status, root.cancel_requested, root.wake_at, root.updated_at) == ("suspended", True, at(5), at(5))
    assert (kid.status, kid.cancel_requested) == ("pending", True)
    assert (blocked.status, blocked.cancel_requested, blocked.finished_at) == ("cancelled", False, at(5))


def test_cancel_with_compensation_of_a_blocked_run_cancels_it_outright(store: Any) -> None:
    running(store, "r1")
    store.block("r1", OWNER, at(1), {"code": "x"})
    assert store.cancel("r1", at(2), compensate=True) == CancelResult(True, (), ("r1",))
    assert (store.get_run("r1").status, store.get_run("r1").cancel_requested) == ("cancelled", False)


def test_notify_settled_wakes_waiters_of_the_run_and_of_the_run_it_retries(store: Any) -> None:
    suspended(store, "w1", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "orig", 1)])
    suspended(store, "w2", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "retry", 1)])
    suspended(store, "w3", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "other", 1)])
    store.create_run(fields("orig"))
    store.create_run(fields("retry", retry_of="orig"))
    assert sorted(store.notify_settled("retry", at(7))) == ["w1", "w2"]
    assert [store.get_run(r).wake_at for r in ("w1", "w2", "w3")] == [at(7), at(7), at(300)]
    assert store.notify_settled("other", at(8)) == ["w3"]
    assert store.notify_settled("nobody-waits", at(9)) == []


def test_wake_makes_suspended_runs_due_now(store: Any) -> None:
    suspended(store, "s1", wake_at=at(300))
    running(store, "r2")
    store.wake(["s1", "r2"], at(3))
    assert (store.get_run("s1").wake_at, store.get_run("r2").wake_at) == (at(3), None)


def test_run_fields_written_with_a_flush(store: Any) -> None:
    running(store, "r1")
    writes = TurnWrites(run_fields={"search_attributes": {"k": 1}, "query_values": {"q": [1]}, "patches": ["p"]})
    assert written(store.commit("r1", OWNER, at(1), at(31), writes))
    run = store.get_run("r1")
    assert (run.search_attributes, run.query_values, run.patches, run.status) == (
        {"k": 1},
        {"q": [1]},
        ["p"],
        "running",
    )
    writes = TurnWrites(run_fields={"search_attributes": {"k": 2}})
    assert written(store.commit("r1", OTHER, at(2), at(32), writes)) is False
    assert store.get_run("r1").search_attributes == {"k": 1}
