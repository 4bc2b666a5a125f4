"""The write plan (durable.engine.plan): what each commit changes, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable.engine import plan, plan_steps
from durable.engine.ports import CheckpointRecord, CheckpointWrite, Outcome, TurnWrites, Waiter
from durable.engine.vocab import (
    EVENT_TOKEN,
    RUN_TOKEN,
    UNSETTLED,
    CheckpointKind,
    CheckpointStatus,
    RunStatus,
)

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
LEASE = NOW + timedelta(seconds=30)
LATER = NOW + timedelta(hours=1)


def _step(seq: int, *, create: bool = True, claimed_by: str | None = None, **fields: object) -> CheckpointWrite:
    rec = CheckpointRecord(seq=seq, name=f"s{seq}", kind=CheckpointKind.LOCAL, status=CheckpointStatus.COMPLETED)
    for name, value in fields.items():
        setattr(rec, name, value)
    expect = () if create else tuple(UNSETTLED)
    return CheckpointWrite(rec, create=create, expect=expect, claimed_by=claimed_by)


def _commit(writes: TurnWrites | None = None, outcome: Outcome | None = None, owner: str = "me") -> plan.CommitPlan:
    return plan.plan_commit("r1", owner, NOW, LEASE, writes or TurnWrites(), outcome)


def _done(**kw: object) -> Outcome:
    return Outcome(RunStatus.COMPLETED, output=1, had_waiters=False, notify=[RUN_TOKEN + "r1"], **kw)  # type: ignore[arg-type]


# -- the compare-and-set condition --------------------------------------------------


def test_every_commit_is_conditional_on_the_lease():
    p = _commit(TurnWrites(checkpoints=[_step(1)]))
    assert p.run.lease == plan.LeaseCheck("r1", "me", RunStatus.RUNNING)
    assert p.run.lease_until == LEASE


def test_a_flush_only_locks_the_run_row_and_leaves_the_lease_to_the_keeper():
    p = plan.plan_flush("r1", "me", NOW, LEASE, TurnWrites(checkpoints=[_step(1)]))
    assert not p.final and p.status is None
    assert p.run.sets == {} and p.run.cancel_wake is None and p.run.lock_only
    assert p.inserts == (TurnWrites(checkpoints=[_step(1)]).checkpoints[0].record,)
    assert p.after == plan.AfterCommit() and p.waiters is None and p.recheck == ()
    assert p.shape == plan.Shape.BATCH


def test_a_flush_writes_the_runs_own_columns():
    p = plan.plan_flush("r1", "me", NOW, LEASE, TurnWrites(run_fields={"patches": ["x"]}))
    assert p.run.sets == {"patches": ["x"]} and not p.run.lock_only


def test_a_suspension_waits_for_its_timer_unless_a_cancel_arrived_on_the_locked_row():
    p = _commit(outcome=Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False, cancel_seen=False))
    assert p.run.cancel_wake == plan.CancelWake(NOW, LATER)
    assert "wake_at" not in p.run.sets
    assert p.run.sets == {
        "status": RunStatus.SUSPENDED,
        "updated_at": NOW,
        "locked_by": None,
        "locked_until": None,
        "awaiting_steps": None,  # it dispatched no step
    }
    assert p.suspends and p.asked_wake == LATER


def test_a_turn_that_already_saw_the_cancel_writes_its_wake_as_is():
    p = _commit(outcome=Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False, cancel_seen=True))
    assert p.run.cancel_wake is None and p.run.sets["wake_at"] == LATER and p.asked_wake == LATER


def test_a_final_commit_releases_the_lease_and_records_the_end():
    p = _commit(outcome=_done())
    assert p.run.sets == {
        "status": RunStatus.COMPLETED,
        "updated_at": NOW,
        "locked_by": None,
        "locked_until": None,
        "wake_at": None,
        "finished_at": NOW,
        "output": 1,
        "error": None,
    }
    assert p.final and p.asked_wake is None


def test_a_blocked_outcome_keeps_the_run_unfinished():
    p = _commit(outcome=Outcome(RunStatus.BLOCKED, error={"code": "x"}))
    assert p.run.sets["error"] == {"code": "x"} and p.run.sets["wake_at"] is None
    assert "finished_at" not in p.run.sets
    assert p.shape == plan.Shape.STATEMENT  # it may have had waiters: they are cleared
    assert _commit(outcome=Outcome(RunStatus.BLOCKED, error={}, had_waiters=False)).shape == plan.Shape.BATCH


def test_the_lifecycle_owed_and_the_successor_are_in_the_same_write_as_the_status():
    nxt = {"id": "r1~1"}
    p = _commit(outcome=_done(next_run=nxt, lifecycle={"owed": ["sub"]}))
    assert p.run.sets["continued_to"] == "r1~1"
    assert (p.run.sets["lifecycle"], p.run.sets["lifecycle_owed"]) == ({"owed": ["sub"]}, True)
    # the successor goes first, before the current run's children
    p = _commit(TurnWrites(new_runs=[{"id": "child"}]), _done(next_run=nxt))
    assert p.new_runs == (nxt, {"id": "child"})
    assert p.shape == plan.Shape.TRANSACTION


# -- checkpoint updates -------------------------------------------------------------


def test_a_checkpoint_update_is_conditional_on_its_expected_statuses_and_keeps_unset_columns():
    write = _step(3, create=False, output=7, finished_at=NOW)
    p = _commit(TurnWrites(checkpoints=[write]))
    (change,) = p.updates
    assert (change.seq, change.expect, change.claimed_by) == (3, tuple(UNSETTLED), None)
    assert set(change.values) == set(plan.CHECKPOINT_UPDATABLE)
    assert not {"seq", "name", "kind", "queue", "enqueued_at", "input"} & set(change.values)
    assert change.keep == ("started_at", "attempts")
    assert change.written()["output"] == 7 and "attempts" not in change.written()
    started = plan.checkpoint_change(_step(3, create=False, started_at=NOW, attempts=2))
    assert started.keep == () and started.written()["attempts"] == 2


def test_settling_a_claimed_step_must_still_hold_its_claim_and_cannot_share_a_statement():
    p = _commit(TurnWrites(checkpoints=[_step(2, create=False, claimed_by="worker-1")]))
    assert p.updates[0].claimed_by == "worker-1"
    assert p.shape == plan.Shape.STATEMENT


# -- shapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writes", "outcome"),
    [
        (TurnWrites(new_runs=[{"id": "c"}]), None),
        (TurnWrites(cancel_runs=["c"]), None),
        (TurnWrites(), Outcome(RunStatus.SUSPENDED, waiters=[Waiter("go", 1)], had_waiters=False)),
        (TurnWrites(), Outcome(RunStatus.SUSPENDED, waiters=[Waiter("go", 1)], had_waiters=True)),
        (TurnWrites(), _done(lifecycle={"owed": ["x"]})),
        (TurnWrites(), _done(next_run={"id": "n"})),
    ],
)
def test_registered_waiters_inserted_or_cancelled_runs_and_successors_need_a_transaction(writes, outcome):
    assert _commit(writes, outcome).shape == plan.Shape.TRANSACTION


_SIGNAL_TAKEN = CheckpointWrite(
    CheckpointRecord(seq=1, name="go", kind=CheckpointKind.SIGNAL, status="completed", output=1), create=False
)


@pytest.mark.parametrize(
    ("writes", "outcome"),
    [
        (TurnWrites(consumed_signals=[5]), None),
        (TurnWrites(checkpoints=[_SIGNAL_TAKEN], consumed_signals=[5]), Outcome(RunStatus.COMPLETED, output=1)),
        (TurnWrites(checkpoints=[_SIGNAL_TAKEN], consumed_signals=[5]), Outcome(RunStatus.SUSPENDED, wake_at=LATER)),
        (TurnWrites(), Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=True)),
        (TurnWrites(), Outcome(RunStatus.CANCELLED, had_waiters=True, notify=["__run__:r1"])),
        (TurnWrites(checkpoints=[_step(1, kind=CheckpointKind.EVENT, create=False)]), _done()),
    ],
)
def test_consumed_signals_and_cleared_waiters_are_one_statement_of_their_own(writes, outcome):
    p = _commit(writes, outcome)
    assert p.shape == plan.Shape.STATEMENT
    if outcome is not None:
        assert p.waiters is not None and p.waiters.clear and not p.waiters.add


def test_steps_timers_and_plain_ends_are_one_shared_statement():
    suspend = Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False, step_seqs=[2])
    for outcome in (None, suspend, _done(), Outcome(RunStatus.FAILED, error={}, had_waiters=False)):
        assert _commit(TurnWrites(checkpoints=[_step(1)]), outcome).shape == plan.Shape.BATCH


# -- waiters and the re-checks --------------------------------------------------------


def test_a_suspension_on_waiters_replaces_the_runs_waiters_and_rechecks_them():
    waiters = [Waiter(EVENT_TOKEN + "paid", 4, {"id": 1}), Waiter(RUN_TOKEN + "child", 5), Waiter(EVENT_TOKEN + "a", 6)]
    p = _commit(outcome=Outcome(RunStatus.SUSPENDED, wake_at=LATER, waiters=waiters, step_seqs=[2], had_waiters=False))
    assert p.waiters == plan.WaiterChange(clear=True, add=tuple(waiters), recheck_waiters=True)
    assert p.event_locks == ("a", "paid")  # sorted: every locker takes them in one order
    assert p.recheck == (4, 5, 6, 2)
    assert plan.waiter_runs(waiters) == ["child"]
    assert plan.waiter_events(waiters) == [("paid", {"id": 1}), ("a", None)]
    assert plan.waiter_signals([*waiters, Waiter("go", 7)]) == ["go"]


def test_a_settled_wait_clears_the_waiter_rows_without_rechecking():
    p = _commit(TurnWrites(consumed_signals=[9]), _done())
    assert p.waiters == plan.WaiterChange(clear=True, add=(), recheck_waiters=False)
    assert p.consumed_signals == (9,) and p.recheck == ()
    p = _commit(outcome=_done())
    assert p.waiters is None  # nothing was waited on: no waiter rows to touch


def test_a_suspension_on_steps_in_flight_rechecks_them():
    p = _commit(outcome=Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False, step_seqs=[3, 4]))
    assert p.recheck == (3, 4) and p.waiters is None


# -- after the commit ---------------------------------------------------------------


def test_a_terminal_run_wakes_its_waiters_and_those_of_the_run_it_retries():
    assert _commit(outcome=_done()).after == plan.AfterCommit((RUN_TOKEN + "r1",), only_if_awaited=True)
    retry = _done()
    retry.notify.append(RUN_TOKEN + "origin")
    after = _commit(outcome=retry).after
    assert after.wake_tokens == (RUN_TOKEN + "r1", RUN_TOKEN + "origin") and not after.only_if_awaited
    suspended = Outcome(RunStatus.SUSPENDED, wake_at=LATER, notify=[RUN_TOKEN + "r1"])
    assert _commit(outcome=suspended).after.wake_tokens == ()


def test_cancelled_children_wake_their_waiters_after_a_final_commit():
    assert _commit(TurnWrites(cancel_runs=["c"]), _done()).after.wake_cancelled
    assert not _commit(TurnWrites(cancel_runs=["c"])).after.wake_cancelled


# -- a page of final commits ----------------------------------------------------------


def test_a_page_shares_one_statement_per_shape_and_owner():
    nap = Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False)
    plans = [
        _commit(outcome=_done()),
        _commit(outcome=nap),
        _commit(outcome=_done()),
        _commit(outcome=nap),
        _commit(outcome=_done(), owner="other"),  # another owner: its own group (of one)
        _commit(TurnWrites(consumed_signals=[1]), _done()),  # a transaction
        _commit(outcome=Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False, cancel_seen=True)),
        plan.plan_flush("r1", "me", NOW, LEASE, TurnWrites()),  # not a final commit
    ]
    page = plan.plan_page(plans)
    assert page.batches == ((0, 2), (1, 3))
    assert page.alone == (4, 5, 6, 7)
    assert plans[1].batch_key != plans[6].batch_key  # a wake as written vs a cancel-aware one


# -- dispatched steps ---------------------------------------------------------------


def test_a_step_claim_takes_a_pending_due_step_of_an_active_run():
    claim = plan_steps.plan_step_claim("r1", 2, "worker", NOW, LEASE)
    assert (claim.kind, claim.expect) == (CheckpointKind.STEP, CheckpointStatus.PENDING)
    assert RunStatus.SUSPENDED in claim.run_statuses and RunStatus.CANCELLED not in claim.run_statuses
    assert claim.sets == {
        "status": CheckpointStatus.RUNNING,
        "locked_by": "worker",
        "wake_at": LEASE,
        "dispatches": 0,
        "started_at": NOW,
        "timeout_at": None,
    }
    assert claim.timeout_at(None) is None and claim.timeout_at(5) == NOW + timedelta(seconds=5)


def test_a_step_result_settles_an_open_checkpoint_and_wakes_the_run():
    ok = plan_steps.plan_step_result("r1", 2, NOW, output={"v": 1})
    assert ok.wake and not ok.retry and ok.take is None
    assert ok.open == tuple(UNSETTLED) and ok.ignored_runs == (RunStatus.CANCELLED, RunStatus.COMPLETED)
    assert ok.sets == {
        "status": CheckpointStatus.COMPLETED,
        "output": {"v": 1},
        "error": None,
        "wake_at": None,
        "finished_at": NOW,
        "locked_by": None,
    }
    failed = plan_steps.plan_step_result("r1", 2, NOW, output="ignored", error={"m": 1}, take=("me", LEASE))
    assert failed.sets["status"] == CheckpointStatus.FAILED and failed.sets["output"] is None
    assert failed.take == ("me", LEASE)


def test_a_step_retry_puts_the_checkpoint_back_to_pending_and_wakes_nothing():
    retry = plan_steps.plan_step_result("r1", 2, NOW, error={"m": 1}, retry_at=LATER)
    assert retry.retry and not retry.wake
    assert retry.sets == {
        "status": CheckpointStatus.PENDING,
        "error": {"m": 1},
        "retry_at": LATER,
        "wake_at": LATER,
        "locked_by": None,
    }


def test_plan_objects_are_frozen():
    p = _commit(outcome=_done())
    with pytest.raises(AttributeError):
        p.shape = plan.Shape.TRANSACTION  # type: ignore[misc]


def _dispatched(seq: int, status: str = CheckpointStatus.PENDING, kind: str = CheckpointKind.STEP) -> CheckpointWrite:
    return _step(seq, kind=kind, status=status)


def test_a_suspension_counts_the_dispatched_steps_it_created():
    writes = TurnWrites(
        checkpoints=[
            _dispatched(1),
            _dispatched(2),
            _dispatched(3, status=CheckpointStatus.COMPLETED),  # an eager step, run in the turn
            _dispatched(4, kind=CheckpointKind.CHILD),  # a child's checkpoint: its run wakes the parent itself
        ]
    )
    p = _commit(writes, Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False))
    assert p.run.sets["awaiting_steps"] == 2


def test_a_suspension_with_a_step_already_in_flight_does_not_count():
    writes = TurnWrites(checkpoints=[_dispatched(2)])
    p = _commit(writes, Outcome(RunStatus.SUSPENDED, wake_at=LATER, had_waiters=False, step_seqs=[1]))
    assert p.run.sets["awaiting_steps"] is None


def test_only_a_suspension_writes_the_count():
    assert "awaiting_steps" not in _commit(TurnWrites(checkpoints=[_dispatched(1)]), _done()).run.sets
    assert "awaiting_steps" not in _commit(TurnWrites(checkpoints=[_dispatched(1)])).run.sets  # a flush


@pytest.mark.parametrize(
    ("awaiting", "settled", "error", "wakes", "left"),
    [
        (None, True, None, True, None),  # the suspension does not count: every result wakes
        (3, True, None, False, 2),
        (1, True, None, True, 0),
        (2, False, None, False, 2),  # a duplicate or refused result counts nothing
        (0, False, None, True, 0),  # ...but re-drives a run whose steps all landed
        (3, True, {"message": "x"}, True, 2),  # a failure wakes at once
    ],
)
def test_a_result_wakes_at_the_last_step_or_a_failure(awaiting, settled, error, wakes, left):
    result = plan_steps.plan_step_result("r", 1, NOW, output=None if error else 1, error=error)
    assert result.counted(awaiting, settled) == (wakes, left)


def test_a_retry_never_wakes():
    retry = plan_steps.plan_step_result("r", 1, NOW, error={"message": "x"}, retry_at=LATER)
    assert retry.counted(1, False) == (False, 1)
