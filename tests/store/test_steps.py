"""Store contract: dispatched steps (claim, renew, heartbeat, settle) and pokes."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.ports import StepClaim
from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from tests.store.conftest import LEASE, OTHER, OWNER, T0, at, creates, finish, record, running, step, suspended

ERROR = {"message": "down", "code": "ConnectionError", "retryable": True, "type": "ConnectionError", "traceback": "tb"}


def test_claim_step_takes_a_pending_step_once(store: Any, probe: Any) -> None:
    suspended(store, "r1", step(1, input={"args": [1], "kwargs": {"k": 2}}, queue="q1"), namespace="ns")
    store.pending_steps("r1", at(1), at(100))  # one redispatch counted, reset by the claim
    claim = store.claim_step("r1", 1, OWNER, at(2), at(62))
    workflow = store.get_run("r1").workflow
    assert claim == StepClaim("r1", 1, "work", {"args": [1], "kwargs": {"k": 2}}, 1, "ns", "q1", T0, workflow)
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.attempts, cp.locked_by, cp.wake_at, cp.started_at, cp.timeout_at) == (
        "running",
        1,
        OWNER,
        at(62),
        at(2),
        None,
    )
    assert probe.step("r1", 1)["dispatches"] == 0
    assert store.claim_step("r1", 1, OTHER, at(3), at(63)) is None
    assert store.load_checkpoints("r1")[1].locked_by == OWNER


def test_claim_step_sets_the_step_timeout(store: Any) -> None:
    suspended(store, "r1", step(1))
    assert store.claim_step("r1", 1, OWNER, at(2), at(62), lambda name: 10.0 if name == "work" else None)
    assert store.load_checkpoints("r1")[1].timeout_at == at(12)


def test_claim_step_waits_for_a_retry_to_fall_due(store: Any) -> None:
    suspended(store, "r1", step(1))
    store.claim_step("r1", 1, OWNER, at(1), at(61))
    store.finish_step("r1", 1, at(2), error=ERROR, retry_at=at(30))
    assert store.claim_step("r1", 1, OWNER, at(29), at(89)) is None
    claim = store.claim_step("r1", 1, OTHER, at(30), at(90))
    assert (claim.attempt, store.load_checkpoints("r1")[1].locked_by) == (2, OTHER)
    assert claim.ready_at == at(30)  # a retry waits from its due time, not from the first dispatch


def test_claim_step_refuses_other_kinds_unknown_steps_and_settled_runs(store: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1), record(2, CheckpointKind.LOCAL, CheckpointStatus.PENDING)))
    assert store.claim_step("r1", 2, OWNER, at(1), at(61)) is None
    assert store.claim_step("r1", 3, OWNER, at(1), at(61)) is None
    assert store.claim_step("nope", 1, OWNER, at(1), at(61)) is None
    store.cancel("r1", at(1))
    assert store.claim_step("r1", 1, OWNER, at(2), at(62)) is None
    assert store.load_checkpoints("r1")[1].status == "pending"


def test_renew_step_only_by_its_claimer(store: Any) -> None:
    suspended(store, "r1", step(1))
    store.claim_step("r1", 1, OWNER, at(1), at(61))
    assert store.renew_step("r1", 1, OTHER, at(99)) is False
    assert store.renew_step("r1", 1, OWNER, at(80)) is True
    assert store.load_checkpoints("r1")[1].wake_at == at(80)
    store.finish_step("r1", 1, at(2), output=1)
    assert store.renew_step("r1", 1, OWNER, at(90)) is False
    assert store.load_checkpoints("r1")[1].wake_at is None


def test_heartbeat_records_progress_and_renews_once_half_the_lease_is_spent(store: Any, probe: Any) -> None:
    suspended(store, "r1", step(1), step(2))
    store.claim_step("r1", 1, OWNER, T0, at(60))
    store.heartbeat_step("r1", 1, at(10), {"done": 1}, at(70))
    got = probe.step("r1", 1)
    assert (got["heartbeat_at"], got["progress"]) == (at(10), {"done": 1})
    assert store.load_checkpoints("r1")[1].wake_at == at(60)  # 60 is past the half (40)
    store.heartbeat_step("r1", 1, at(50), {"done": 2}, at(110))
    assert store.load_checkpoints("r1")[1].wake_at == at(110)  # 60 is before the half (80)
    store.heartbeat_step("r1", 2, at(50), {"done": 9}, at(110))  # not running: nothing
    assert (probe.step("r1", 2)["progress"], store.load_checkpoints("r1")[2].wake_at) == (None, None)


def test_finish_step_settles_and_wakes_the_suspended_run(store: Any, probe: Any) -> None:
    suspended(store, "r1", step(1), wake_at=at(300))
    store.claim_step("r1", 1, OWNER, at(1), at(61))
    assert store.finish_step("r1", 1, at(5), output={"ok": [1]}) is True
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output, cp.error, cp.wake_at, cp.finished_at, cp.locked_by) == (
        "completed",
        {"ok": [1]},
        None,
        None,
        at(5),
        None,
    )
    assert store.get_run("r1").wake_at == at(5)


def test_a_settled_checkpoint_always_wins_and_a_duplicate_still_wakes(store: Any) -> None:
    suspended(store, "r1", step(1), wake_at=at(300))
    store.finish_step("r1", 1, at(5), output="first")
    store.acquire("r1", OWNER, at(5), at(35))
    store.release("r1", OWNER, at(6), at(300), False)
    assert store.finish_step("r1", 1, at(7), error=ERROR) is True
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output, cp.error, cp.finished_at) == ("completed", "first", None, at(5))
    assert store.get_run("r1").wake_at == at(7)
    assert store.finish_step("r1", 1, at(8), error=ERROR, retry_at=at(9)) is False
    assert store.load_checkpoints("r1")[1].status == "completed"


def test_finish_step_records_a_failure(store: Any) -> None:
    suspended(store, "r1", step(1))
    store.claim_step("r1", 1, OWNER, at(1), at(61))
    assert store.finish_step("r1", 1, at(5), error=ERROR) is True
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.error, cp.output, cp.wake_at, cp.finished_at, cp.locked_by) == (
        "failed",
        ERROR,
        None,
        None,
        at(5),
        None,
    )


def test_finish_step_schedules_a_retry_without_waking_the_run(store: Any) -> None:
    suspended(store, "r1", step(1), wake_at=at(300))
    store.claim_step("r1", 1, OWNER, at(1), at(61))
    assert store.finish_step("r1", 1, at(5), error=ERROR, retry_at=at(35)) is False
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.error, cp.retry_at, cp.wake_at, cp.locked_by, cp.attempts) == (
        "pending",
        ERROR,
        at(35),
        at(35),
        None,
        1,
    )
    assert store.get_run("r1").wake_at == at(300)


@pytest.mark.parametrize("status", [RunStatus.CANCELLED, RunStatus.COMPLETED])
def test_results_for_cancelled_and_completed_runs_are_dropped(store: Any, status: str) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1)))
    if status == RunStatus.CANCELLED:
        store.cancel("r1", at(1))
    else:
        finish(store, "r1")
    assert store.finish_step("r1", 1, at(2), output="late") is False
    assert store.finish_step("r1", 1, at(2), error=ERROR, retry_at=at(3)) is False
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output, cp.error, cp.retry_at) == ("pending", None, None, None)
    assert store.finish_step_and_acquire("r1", 1, at(2), OWNER, at(32), output="late") is None
    assert store.load_checkpoints("r1")[1].status == "pending"


def test_a_late_result_for_a_failed_run_is_kept_but_does_not_resume_it(store: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1)))
    finish(store, "r1", RunStatus.FAILED, error=ERROR)
    assert store.finish_step_and_acquire("r1", 1, at(2), OWNER, at(32), output="late") is None
    run = store.get_run("r1")
    assert (run.status, run.wake_at, run.locked_by) == ("failed", None, None)
    assert (store.load_checkpoints("r1")[1].status, store.load_checkpoints("r1")[1].output) == ("completed", "late")


def test_a_result_while_the_run_is_running_settles_without_waking(store: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1)))
    assert store.finish_step("r1", 1, at(2), output=1) is False
    run = store.get_run("r1")
    assert (run.status, run.wake_at, store.load_checkpoints("r1")[1].status) == ("running", None, "completed")
    assert store.finish_step("nope", 1, at(2), output=1) is False


def test_finish_step_and_acquire_leases_the_woken_run(store: Any) -> None:
    suspended(store, "r1", step(1), wake_at=at(300))
    run = store.finish_step_and_acquire("r1", 1, at(5), OTHER, at(35), output="v")
    assert (run.status, run.locked_by, run.locked_until, run.turns, run.started_at) == ("running", OTHER, at(35), 2, T0)
    assert store.load_checkpoints("r1")[1].output == "v"
    assert store.lease_held("r1", OTHER) is True


def test_finish_step_and_acquire_of_a_run_held_elsewhere(store: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1)))
    assert store.finish_step_and_acquire("r1", 1, at(5), OTHER, at(35), error=ERROR) is None
    assert store.get_run("r1").locked_by == OWNER
    assert store.load_checkpoints("r1")[1].status == "failed"


def test_poke_wakes_only_a_suspended_run(store: Any) -> None:
    suspended(store, "r1", wake_at=at(300))
    running(store, "r2")
    assert store.poke("r1", at(3)) is True
    assert store.get_run("r1").wake_at == at(3)
    assert store.poke("r2", at(3)) is False
    assert store.get_run("r2").wake_at is None
    assert store.poke("nope", at(3)) is False


def test_poke_if_settled_wakes_only_for_a_settled_step(store: Any) -> None:
    suspended(store, "r1", step(1), step(2), wake_at=at(300))
    running(store, "r2")
    assert store.poke_if_settled("r1", 1, at(3)) is False
    assert store.get_run("r1").wake_at == at(300)
    store.finish_step("r1", 2, at(4), error=ERROR)
    store.acquire("r1", OWNER, at(4), at(34))
    store.release("r1", OWNER, at(5), at(300), False)
    assert store.poke_if_settled("r1", 2, at(6)) is True
    assert store.get_run("r1").wake_at == at(6)
