"""Store contract: the sweeps' queries and their compare-and-set writes."""

from __future__ import annotations

from typing import Any

from durable.engine.ports import ClaimCheck, Waiter
from durable.engine.vocab import CheckpointKind, CheckpointStatus
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
)

TIMEOUT = {"message": "too slow", "code": "timeout", "retryable": False, "type": "Timeout", "traceback": None}


def _due_world(store: Any) -> None:
    store.create_run(fields("p-low", created_at=at(-10)))
    store.create_run(fields("p-high", priority=5, created_at=at(-1)))
    store.create_run(fields("p-old-high", priority=5, created_at=at(-5)))
    for run_id, wake in (("s-late", 50), ("s-early", 20), ("s-future", 500)):
        suspended(store, run_id, wake_at=at(wake))
    running(store, "busy")


def test_due_runs_lists_pending_by_priority_then_due_sleepers_by_wake(store: Any) -> None:
    _due_world(store)
    assert store.due_runs(at(100), 10) == ["p-old-high", "p-high", "p-low", "s-early", "s-late"]
    assert store.due_runs(at(100), 4) == ["p-old-high", "p-high", "p-low", "s-early"]
    assert store.due_runs(at(100), 2) == ["p-old-high", "p-high"]
    assert store.due_runs(at(30), 10) == ["p-old-high", "p-high", "p-low", "s-early"]


def test_claim_due_runs_leases_a_page_in_due_order(store: Any) -> None:
    _due_world(store)
    page = store.claim_due_runs(OWNER, at(100), at(130), 4)
    assert [r.id for r in page] == ["p-old-high", "p-high", "p-low", "s-early"]
    for run in page:
        assert (run.status, run.locked_by, run.locked_until, run.updated_at) == ("running", OWNER, at(130), at(100))
    assert [r.turns for r in page] == [1, 1, 1, 2]
    assert (page[0].started_at, page[3].started_at) == (at(100), T0)
    rest = store.claim_due_runs(OTHER, at(100), at(130), 4)
    assert [r.id for r in rest] == ["s-late"]
    assert store.claim_due_runs(OTHER, at(100), at(130), 4) == []
    assert store.get_run("s-future").status == "suspended"


def test_next_wake_is_the_earliest_suspended_wake(store: Any) -> None:
    assert store.next_wake() is None
    _due_world(store)
    assert store.next_wake() == at(20)


def test_next_due_includes_dispatched_step_wakes(store: Any) -> None:
    assert store.next_due() is None
    suspended(store, "r1", step(1, wake_at=at(40)), wake_at=at(90))
    assert store.next_due() == at(40)
    store.claim_step("r1", 1, OWNER, at(1), at(200))
    assert store.next_due() == at(90)


def test_due_steps_lists_claimable_steps_of_active_runs(store: Any) -> None:
    suspended(
        store, "r1", step(1, enqueued_at=at(3), queue="q"), step(2, enqueued_at=at(1)), step(3, enqueued_at=at(2))
    )
    suspended(store, "r2", step(1, enqueued_at=at(0)))
    store.cancel("r2", at(1))
    store.claim_step("r1", 3, OWNER, at(4), at(64))
    store.finish_step("r1", 3, at(5), error=TIMEOUT, retry_at=at(50))
    store.claim_step("r1", 2, OWNER, at(4), at(64))
    assert store.due_steps(at(10), 10) == [("r1", 1, "q")]
    assert store.due_steps(at(50), 10) == [("r1", 3, None), ("r1", 1, "q")]
    assert store.due_steps(at(50), 1) == [("r1", 3, None)]


def test_orphans_are_running_runs_whose_lease_expired(store: Any) -> None:
    running(store, "r1")
    running(store, "r2", now=at(20))
    suspended(store, "s1")
    assert store.orphans(at(30), 10) == []
    assert store.orphans(at(31), 10) == ["r1"]
    assert sorted(store.orphans(at(51), 10)) == ["r1", "r2"]
    assert len(store.orphans(at(51), 1)) == 1


def test_recover_orphan_takes_the_expired_lease_and_counts_a_recovery(store: Any) -> None:
    running(store, "r1")
    assert store.recover_orphan("r1", OTHER, at(30), at(60), 3) is None  # not expired yet
    run = store.recover_orphan("r1", OTHER, at(31), at(61), 3)
    assert (run.status, run.locked_by, run.locked_until, run.recovery_attempts, run.turns) == (
        "running",
        OTHER,
        at(61),
        1,
        2,
    )
    stored = store.get_run("r1")
    assert (stored.locked_by, stored.recovery_attempts, stored.turns, stored.updated_at) == (OTHER, 1, 2, at(31))
    assert store.recover_orphan("r1", OWNER, at(40), at(70), 3) is None  # the new lease holds


def test_recover_orphan_dead_letters_past_the_maximum(store: Any) -> None:
    running(store, "r1", workflow="billing")
    store.recover_orphan("r1", OTHER, at(31), at(61), 1)
    seen: list[str] = []

    def owed(workflow: str) -> dict[str, Any]:
        seen.append(workflow)
        return {"owed": ["audit"]}

    assert store.recover_orphan("r1", OWNER, at(62), at(92), 1, owed) == "dead"
    run = store.get_run("r1")
    assert (run.status, run.recovery_attempts, run.finished_at, run.locked_by, run.locked_until) == (
        "dead",
        2,
        at(62),
        None,
        None,
    )
    assert (run.lifecycle, run.lifecycle_owed, seen) == ({"owed": ["audit"]}, True, ["billing"])
    assert run.error == {
        "message": "run was orphaned 2 times (limit 1); giving up",
        "code": "max_recovery_attempts",
        "retryable": False,
        "type": "Dead",
        "traceback": None,
    }


def test_recover_orphan_leaves_moved_on_runs_alone(store: Any) -> None:
    running(store, "r1")
    store.cancel("r1", at(1))
    assert store.recover_orphan("r1", OTHER, at(31), at(61), 0) is None
    assert store.get_run("r1").status == "cancelled"
    suspended(store, "s1")
    assert store.recover_orphan("s1", OTHER, at(31), at(61), 0) is None


def test_overdue_runs_are_active_past_their_deadline_and_not_yet_asked(store: Any) -> None:
    store.create_run(fields("late", deadline_at=at(10)))
    store.create_run(fields("on-time", deadline_at=at(100)))
    store.create_run(fields("no-deadline"))
    running(store, "done", deadline_at=at(5))
    finish(store, "done")
    assert store.overdue_runs(at(11), 10) == ["late"]
    assert store.overdue_runs(at(10), 10) == []
    assert store.request_timeout("late", at(11), TIMEOUT) is True
    assert store.overdue_runs(at(11), 10) == []


def test_request_timeout_asks_the_run_to_stop_and_wakes_it(store: Any) -> None:
    suspended(store, "r1", wake_at=at(300))
    store.create_run(fields("r2", deadline_at=at(10)))
    # (the suspended run was created without a deadline: it is not overdue)
    assert store.request_timeout("r1", at(11), TIMEOUT) is False
    running(store, "r3", deadline_at=at(10))
    assert store.request_timeout("r3", at(11), TIMEOUT) is True
    run = store.get_run("r3")
    assert (run.cancel_requested, run.error, run.updated_at, run.status) == (True, TIMEOUT, at(11), "running")
    assert store.request_timeout("r3", at(12), TIMEOUT) is False
    assert store.request_timeout("r2", at(9), TIMEOUT) is False  # not overdue yet
    assert store.get_run("r2").cancel_requested is False


def test_request_timeout_of_a_suspended_run_makes_it_due(store: Any) -> None:
    running(store, "r1", deadline_at=at(10))
    suspend(store, "r1", wake_at=at(300))
    assert store.request_timeout("r1", at(11), TIMEOUT) is True
    assert (store.get_run("r1").wake_at, store.get_run("r1").cancel_requested) == (at(11), True)


def test_request_timeout_refuses_a_blocked_run(store: Any) -> None:
    running(store, "r1", deadline_at=at(10))
    store.block("r1", OWNER, at(1), {"code": "x"})
    assert store.request_timeout("r1", at(11), TIMEOUT) is False


def test_fail_overdue_fails_the_run_and_drops_its_waiters(store: Any, probe: Any) -> None:
    running(store, "r1", deadline_at=at(10))
    suspend(store, "r1", wake_at=at(300), waiters=[Waiter("go", 1)])
    assert store.fail_overdue("r1", at(9), TIMEOUT) is False
    assert store.fail_overdue("r1", at(11), TIMEOUT, {"owed": ["sub"]}) is True
    run = store.get_run("r1")
    assert (run.status, run.error, run.finished_at, run.wake_at, run.locked_by) == (
        "failed",
        TIMEOUT,
        at(11),
        None,
        None,
    )
    assert (run.lifecycle, run.lifecycle_owed) == ({"owed": ["sub"]}, True)
    assert probe.waiters("r1") == []
    assert store.fail_overdue("r1", at(12), TIMEOUT) is False


def test_expired_steps_are_running_steps_past_their_lease_or_timeout(store: Any) -> None:
    suspended(store, "r1", step(1), step(2), step(3), step(4, queue="q"))
    store.claim_step("r1", 1, OWNER, at(1), at(20))
    store.claim_step("r1", 2, OWNER, at(1), at(90), lambda name: 10.0)
    store.claim_step("r1", 3, OWNER, at(1), at(90))
    got = sorted(store.expired_steps(at(21), 10), key=lambda row: row["seq"])
    assert got == [
        {
            "run_id": "r1",
            "seq": 1,
            "name": "work",
            "queue": None,
            "attempts": 1,
            "locked_by": OWNER,
            "wake_at": at(20),
            "timeout_at": None,
        },
        {
            "run_id": "r1",
            "seq": 2,
            "name": "work",
            "queue": None,
            "attempts": 1,
            "locked_by": OWNER,
            "wake_at": at(90),
            "timeout_at": at(11),
        },
    ]
    assert len(store.expired_steps(at(21), 1)) == 1


LOST = {"message": "worker gone", "code": "worker_lost", "retryable": True, "type": "WorkerLost", "traceback": None}


def test_lapse_step_retries_a_lapsed_attempt_once_under_its_claim(store: Any) -> None:
    suspended(store, "r1", step(1))
    store.claim_step("r1", 1, OWNER, at(1), at(20))
    claim = ClaimCheck(OWNER, 1)
    assert store.lapse_step("r1", 1, at(20), claim, LOST, at(40)) is False  # not lapsed yet: 20 is not before 20
    assert store.lapse_step("r1", 1, at(21), ClaimCheck(OTHER, 1), LOST, at(40)) is False  # not its claim
    assert store.lapse_step("r1", 1, at(21), ClaimCheck(OWNER, 2), LOST, at(40)) is False  # not that attempt
    assert store.lapse_step("r1", 1, at(21), claim, LOST, at(40)) is True
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.locked_by, cp.attempts, cp.error, cp.retry_at, cp.wake_at) == (
        "pending",
        None,
        1,
        LOST,
        at(40),
        at(40),
    )
    # A second sweeper on the same attempt, and the late result of its worker, find nothing to do.
    assert store.lapse_step("r1", 1, at(22), claim, LOST, at(41)) is False
    # Refused: records nothing, and wakes nothing (the run counts its one step, still out).
    assert store.finish_step("r1", 1, at(23), output="late", claim=claim) is False
    assert store.load_checkpoints("r1")[1].status == "pending"
    assert store.get_run("r1").status == "suspended"
    assert store.claim_step("r1", 1, OWNER, at(39), at(99)) is None  # the backoff holds
    assert store.claim_step("r1", 1, OWNER, at(40), at(99)).attempt == 2


def test_lapse_step_past_the_retries_fails_the_step_and_wakes_the_run(store: Any) -> None:
    suspended(store, "r1", step(1), wake_at=at(500))
    store.claim_step("r1", 1, OWNER, at(1), at(90), lambda name: 10.0)
    assert store.lapse_step("r1", 1, at(11), ClaimCheck(OWNER, 1), LOST) is False  # at its timeout, not past
    assert store.lapse_step("r1", 1, at(12), ClaimCheck(OWNER, 1), LOST) is True  # its timeout passed
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.error, cp.finished_at, cp.locked_by) == ("failed", LOST, at(12), None)
    assert store.get_run("r1").wake_at == at(12)
    assert store.lapse_step("r1", 1, at(13), ClaimCheck(OWNER, 1), LOST) is False


def test_a_renewed_lease_is_not_lapsed(store: Any) -> None:
    suspended(store, "r1", step(1))
    store.claim_step("r1", 1, OWNER, at(1), at(20))
    assert store.renew_step("r1", 1, OWNER, at(50))  # after the sweep read it lapsed, before it wrote
    assert store.lapse_step("r1", 1, at(21), ClaimCheck(OWNER, 1), LOST, at(40)) is False
    assert store.load_checkpoints("r1")[1].status == "running"


def test_a_result_under_a_later_claim_is_refused(store: Any) -> None:
    suspended(store, "r1", step(1))
    store.claim_step("r1", 1, OWNER, at(1), at(20))
    store.lapse_step("r1", 1, at(21), ClaimCheck(OWNER, 1), LOST, at(21))
    store.claim_step("r1", 1, OWNER, at(22), at(80))  # the same owner claims the retry (attempt 2)
    store.finish_step("r1", 1, at(23), output="from attempt 1", claim=ClaimCheck(OWNER, 1))
    # Refused: it counts nothing, so the run (waiting on its one step) is neither woken nor taken.
    assert store.finish_step_and_acquire("r1", 1, at(24), OTHER, at(54), output="x", claim=ClaimCheck(OTHER, 2)) is None
    assert store.load_checkpoints("r1")[1].status == "running"
    assert store.finish_step("r1", 1, at(25), output="from attempt 2", claim=ClaimCheck(OWNER, 2)) is True
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output, cp.attempts) == ("completed", "from attempt 2", 2)


def test_lost_steps_are_pending_steps_past_their_redelivery_time(store: Any) -> None:
    suspended(store, "r1", step(1, wake_at=at(20)), step(2, wake_at=at(10), queue="q"), step(3, wake_at=at(99)))
    suspended(store, "r2", step(1, wake_at=at(5)))
    store.cancel("r2", at(1))
    assert store.lost_steps(at(25), 10) == [
        {"run_id": "r1", "seq": 2, "name": "work", "queue": "q", "dispatches": 0, "wake_at": at(10), "retry_at": None},
        {"run_id": "r1", "seq": 1, "name": "work", "queue": None, "dispatches": 0, "wake_at": at(20), "retry_at": None},
    ]
    assert [row["seq"] for row in store.lost_steps(at(25), 1)] == [2]
    assert store.redispatch_step("r1", 2, at(10), at(30))
    assert store.lost_steps(at(25), 10) == [
        {"run_id": "r1", "seq": 1, "name": "work", "queue": None, "dispatches": 0, "wake_at": at(20), "retry_at": None},
    ]
    assert [(row["seq"], row["dispatches"]) for row in store.lost_steps(at(30), 10)] == [(1, 0), (2, 1)]


def test_redispatch_step_is_compare_and_set_on_the_wake(store: Any, probe: Any) -> None:
    suspended(store, "r1", step(1, wake_at=at(20)))
    assert store.redispatch_step("r1", 1, at(19), at(40)) is False
    assert store.redispatch_step("r1", 1, at(20), at(40)) is True
    assert store.redispatch_step("r1", 1, at(20), at(60)) is False
    assert (store.load_checkpoints("r1")[1].wake_at, probe.step("r1", 1)["dispatches"]) == (at(40), 1)
    store.claim_step("r1", 1, OWNER, at(41), at(100))
    assert store.redispatch_step("r1", 1, at(100), at(120)) is False  # running, not pending


def test_blocked_runs_lists_the_parked_runs_and_why(store: Any) -> None:
    running(store, "b1", workflow="wf2", version=3)
    store.block("b1", OWNER, at(1), {"code": "workflow_not_registered"})
    running(store, "r2")
    assert store.blocked_runs(10) == [
        {"id": "b1", "workflow": "wf2", "version": 3, "error": {"code": "workflow_not_registered"}}
    ]
    assert store.blocked_runs(0) == []


def test_sweep_writes_ignore_other_kinds(store: Any) -> None:
    running(store, "r1")
    sleep = record(1, CheckpointKind.SLEEP, CheckpointStatus.PENDING, wake_at=at(5))
    store.commit("r1", OWNER, T0, LEASE, creates(sleep))
    assert (store.lost_steps(at(10), 10), store.expired_steps(at(10), 10), store.due_steps(at(10), 10)) == ([], [], [])


def test_a_store_says_whether_turns_of_different_runs_may_write_at_once(store: Any) -> None:
    from durable.store.memory import MemoryStore

    if isinstance(store, MemoryStore):
        assert store.parallel_writes() is True  # each write holds its lock only briefly
        return
    from django.db import connection

    # One writer at a time where the database has no row locks (SQLite).
    assert store.parallel_writes() is bool(connection.features.has_select_for_update)
