"""Store contract: a turn's commit (checkpoints, settle, waiters) and the page commit."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.ports import CheckpointWrite, Outcome, TurnWrites, Waiter
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
    suspend,
    suspended,
    wake_of,
    woken,
    written,
)

ERROR = {"message": "no", "code": "x", "retryable": False, "type": "E", "traceback": None}


def test_a_flush_writes_checkpoints_and_keeps_the_run_running(store: Any) -> None:
    running(store, "r1")
    local = record(1, CheckpointKind.LOCAL, output={"v": [1]}, attempts=1, started_at=at(1), finished_at=at(2))
    assert written(store.commit("r1", OWNER, at(2), at(32), creates(local, step(2))))
    cps = store.load_checkpoints("r1")
    assert list(cps) == [1, 2]
    assert cps[1] == local
    assert (cps[2].kind, cps[2].status, cps[2].input, cps[2].enqueued_at) == (
        "step",
        "pending",
        {"args": [2], "kwargs": {}},
        T0,
    )
    run = store.get_run("r1")
    assert (run.status, run.locked_by) == ("running", OWNER)


def test_a_commit_of_many_checkpoints_writes_each_rows_values(store: Any) -> None:
    """Past a few dozen rows a commit writes its checkpoints from one array per column (PostgreSQL);
    a column with one value on every row may go as that value alone: each row still gets its own."""
    running(store, "r1")
    steps = [step(seq, name="same", queue="q" if seq % 2 else None) for seq in range(1, 41)]
    steps += [record(41, CheckpointKind.LOCAL, output=None, finished_at=at(2))]
    assert written(store.commit("r1", OWNER, at(2), at(32), creates(*steps)))
    cps = store.load_checkpoints("r1")
    assert list(cps) == list(range(1, 42))
    assert {(cps[s].name, cps[s].status, cps[s].enqueued_at) for s in range(1, 41)} == {("same", "pending", T0)}
    assert [cps[s].input for s in range(1, 41)] == [{"args": [s], "kwargs": {}} for s in range(1, 41)]
    assert [cps[s].queue for s in range(1, 41)] == ["q" if s % 2 else None for s in range(1, 41)]
    assert (cps[41].kind, cps[41].name, cps[41].output, cps[41].queue) == ("local", "op41", None, None)


def test_an_array_column_goes_as_its_one_value_only_when_every_row_holds_it() -> None:
    from durable.store.statements import column_params

    when = at(1)
    assert column_params([when, at(1), when]) == [None, when, 3]  # equal instants, distinct objects
    assert column_params([None, None]) == [None, None, 2]  # NULL on every row
    assert column_params([when, None]) == [[when, None], None, 0]
    assert column_params(["a", "b"]) == [["a", "b"], None, 0]
    assert column_params([]) == [[], None, 0]


def test_a_commit_by_a_non_holder_writes_nothing(store: Any) -> None:
    running(store, "r1")
    writes = creates(record(1, CheckpointKind.LOCAL, output=1))
    writes.run_fields = {"patches": ["p"]}
    assert written(store.commit("r1", OTHER, at(1), at(31), writes)) is False
    outcome = Outcome(RunStatus.COMPLETED, output=1, had_waiters=False)
    assert written(store.commit("r1", OTHER, at(1), at(31), creates(record(2, CheckpointKind.NOW)), outcome)) is False
    assert store.load_checkpoints("r1") == {}
    run = store.get_run("r1")
    assert (run.status, run.locked_by, run.output, run.patches) == ("running", OWNER, None, [])


def test_a_commit_after_a_takeover_is_refused(store: Any) -> None:
    running(store, "r1")
    assert store.recover_orphan("r1", OTHER, at(31), at(61), 5) is not None
    result, _ = finish(store, "r1", output="stale")
    assert written(result) is False
    run = store.get_run("r1")
    assert (run.status, run.locked_by, run.output) == ("running", OTHER, None)


def test_completing_settles_the_run_and_releases_the_lease(store: Any) -> None:
    running(store, "r1")
    result, outcome = finish(store, "r1", output={"done": True})
    assert written(result)
    run = store.get_run("r1")
    assert (run.status, run.output, run.error, run.finished_at, run.updated_at) == (
        "completed",
        {"done": True},
        None,
        at(1),
        at(1),
    )
    assert (run.wake_at, run.locked_by, run.locked_until, run.lifecycle_owed) == (None, None, None, False)
    assert woken(result, outcome) == []
    assert store.lease_held("r1", OWNER) is False


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.CANCELLED])
def test_failing_and_cancelling_record_the_error(store: Any, status: str) -> None:
    running(store, "r1")
    result, _ = finish(store, "r1", status, error=ERROR)
    assert written(result)
    run = store.get_run("r1")
    assert (run.status, run.error, run.output, run.finished_at, run.locked_by) == (status, ERROR, None, at(1), None)


def test_blocking_outcome_parks_the_run_without_a_wake(store: Any) -> None:
    running(store, "r1")
    result, _ = finish(store, "r1", RunStatus.BLOCKED, error={"code": "no_capable_worker"})
    assert written(result)
    run = store.get_run("r1")
    assert (run.status, run.error, run.wake_at, run.finished_at, run.locked_by) == (
        "blocked",
        {"code": "no_capable_worker"},
        None,
        None,
        None,
    )


def test_suspending_writes_the_wake_and_releases_the_lease(store: Any) -> None:
    running(store, "r1")
    sleep = record(1, CheckpointKind.SLEEP, CheckpointStatus.PENDING, wake_at=at(90))
    result, outcome = suspend(store, "r1", sleep, wake_at=at(90), now=at(2))
    assert written(result)
    assert wake_of(result, outcome) == at(90)
    run = store.get_run("r1")
    assert (run.status, run.wake_at, run.locked_by, run.locked_until, run.updated_at) == (
        "suspended",
        at(90),
        None,
        None,
        at(2),
    )
    assert store.load_checkpoints("r1")[1].wake_at == at(90)


def test_a_second_checkpoint_at_a_position_fails_the_whole_commit(store: Any) -> None:
    running(store, "r1")
    assert written(store.commit("r1", OWNER, at(1), at(31), creates(record(1, CheckpointKind.LOCAL, output=1))))
    writes = creates(record(2, CheckpointKind.LOCAL, output=2), record(1, CheckpointKind.LOCAL, output="again"))
    writes.run_fields = {"patches": ["p"]}
    with pytest.raises(Exception), store.atomic():
        store.commit("r1", OWNER, at(2), at(32), writes, Outcome(RunStatus.COMPLETED, output=3, had_waiters=False))
    cps = store.load_checkpoints("r1")
    assert (list(cps), cps[1].output) == ([1], 1)
    run = store.get_run("r1")
    assert (run.status, run.patches, run.output) == ("running", [], None)


def test_checkpoint_updates_apply_only_over_an_expected_status(store: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1, attempts=2, started_at=at(1)), step(2)))
    store.finish_step("r1", 2, at(2), output="landed")
    cancelled = dict(status=CheckpointStatus.FAILED, error=ERROR, finished_at=at(3))
    writes = TurnWrites(
        checkpoints=[
            CheckpointWrite(
                step(1, name="renamed", input="other", **cancelled), create=False, expect=("pending", "running")
            ),
            CheckpointWrite(step(2, **cancelled), create=False, expect=("pending", "running")),
        ]
    )
    assert written(store.commit("r1", OWNER, at(3), at(33), writes))
    cps = store.load_checkpoints("r1")
    assert (cps[1].status, cps[1].error, cps[1].finished_at) == ("failed", ERROR, at(3))
    # Identity and dispatch columns stay as inserted; unset attempts and start keep their values.
    assert (cps[1].name, cps[1].input, cps[1].attempts, cps[1].started_at) == (
        "work",
        {"args": [1], "kwargs": {}},
        2,
        at(1),
    )
    assert (cps[2].status, cps[2].output, cps[2].error) == ("completed", "landed", None)  # a settled one wins


def test_settling_a_claimed_step_needs_the_claim_to_still_be_ours(store: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1), step(2)))
    assert store.claim_step("r1", 1, OWNER, at(1), at(61)) is not None
    assert store.claim_step("r1", 2, OTHER, at(1), at(61)) is not None
    mine = CheckpointWrite(
        step(1, CheckpointStatus.COMPLETED, output="ok", finished_at=at(2)),
        create=False,
        expect=("running",),
        claimed_by=OWNER,
    )
    theirs = CheckpointWrite(
        step(2, CheckpointStatus.COMPLETED, output="ok", finished_at=at(2)),
        create=False,
        expect=("running",),
        claimed_by=OWNER,
    )
    refused = TurnWrites(checkpoints=[theirs], new_runs=[fields("side")])
    refused.checkpoints.append(CheckpointWrite(record(3, CheckpointKind.NOW), create=True))
    assert written(store.commit("r1", OWNER, at(2), at(32), refused)) is False
    cps = store.load_checkpoints("r1")
    assert (sorted(cps), cps[2].status, cps[2].locked_by) == ([1, 2], "running", OTHER)
    assert store.get_run("side") is None
    assert written(store.commit("r1", OWNER, at(2), at(32), TurnWrites(checkpoints=[mine])))
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output, cp.locked_by) == ("completed", "ok", None)


def test_waiters_are_replaced_by_each_suspension_and_removed_at_the_end(store: Any, probe: Any) -> None:
    running(store, "r1")
    signal = record(1, CheckpointKind.SIGNAL, CheckpointStatus.PENDING)
    result, _ = suspend(store, "r1", signal, waiters=[Waiter("go", 1), Waiter(EVENT_TOKEN + "e", 2, {"k": 1})])
    assert written(result)
    assert probe.waiters("r1") == [("go", 1, None), (EVENT_TOKEN + "e", 2, {"k": 1})]
    assert store.acquire("r1", OWNER, at(300), at(330))
    outcome = Outcome(RunStatus.SUSPENDED, wake_at=at(600), waiters=[Waiter("stop", 3)], had_waiters=True)
    assert written(store.commit("r1", OWNER, at(300), at(330), TurnWrites(), outcome))
    assert probe.waiters("r1") == [("stop", 3, None)]
    assert store.acquire("r1", OWNER, at(600), at(630))
    outcome = Outcome(RunStatus.COMPLETED, had_waiters=True)
    assert written(store.commit("r1", OWNER, at(600), at(630), TurnWrites(), outcome))
    assert probe.waiters("r1") == []


def test_a_signal_buffered_before_the_wait_wakes_the_suspension_at_once(store: Any) -> None:
    running(store, "r1")
    assert store.signal("r1", "go", {"n": 1}, at(1)) is False
    result, outcome = suspend(store, "r1", waiters=[Waiter("go", 1)], wake_at=at(300), now=at(2))
    assert written(result)
    assert (store.get_run("r1").wake_at, wake_of(result, outcome)) == (at(2), at(2))


def test_a_run_awaited_after_it_settled_wakes_the_waiter_at_once(store: Any, probe: Any) -> None:
    running(store, "kid")
    finish(store, "kid")
    store.create_run(fields("later"))
    running(store, "r1")
    result, outcome = suspend(store, "r1", waiters=[Waiter(RUN_TOKEN + "kid", 1)], wake_at=at(300), now=at(2))
    assert (store.get_run("r1").wake_at, wake_of(result, outcome)) == (at(2), at(2))
    running(store, "r2")
    result, outcome = suspend(store, "r2", waiters=[Waiter(RUN_TOKEN + "later", 1)], wake_at=at(300), now=at(2))
    assert (store.get_run("r2").wake_at, wake_of(result, outcome)) == (at(300), at(300))
    assert (probe.awaited("kid"), probe.awaited("later")) == (True, True)


def test_a_matching_buffered_event_wakes_the_waiter_and_another_does_not(store: Any) -> None:
    store.publish_event("paid", {"order": 1}, "ev-1", at(1))
    running(store, "r1")
    result, outcome = suspend(store, "r1", waiters=[Waiter(EVENT_TOKEN + "paid", 1, {"order": 2})], wake_at=at(300))
    assert wake_of(result, outcome) == at(300)
    running(store, "r2")
    result, outcome = suspend(store, "r2", waiters=[Waiter(EVENT_TOKEN + "paid", 1, {"order": 1})], wake_at=at(300))
    assert (store.get_run("r2").wake_at, wake_of(result, outcome)) == (T0, T0)


def test_a_step_result_that_landed_during_the_turn_wakes_the_suspension(store: Any) -> None:
    running(store, "r1")
    store.commit("r1", OWNER, T0, LEASE, creates(step(1), step(2)))
    assert store.finish_step("r1", 1, at(1), output="fast") is False  # the run was running: not woken
    result, outcome = suspend(store, "r1", wake_at=at(300), step_seqs=[1], now=at(2))
    assert (store.get_run("r1").wake_at, wake_of(result, outcome)) == (at(2), at(2))
    assert store.acquire("r1", OWNER, at(2), at(32))
    result, outcome = suspend(store, "r1", wake_at=at(300), step_seqs=[2], now=at(3))
    assert (store.get_run("r1").wake_at, wake_of(result, outcome)) == (at(300), at(300))


def test_a_cancel_with_undo_during_the_turn_makes_the_suspension_due_now(store: Any) -> None:
    running(store, "r1")
    store.cancel("r1", at(1), compensate=True)
    assert store.get_run("r1").cancel_requested is True
    result, _outcome = suspend(store, "r1", wake_at=at(300), now=at(2))
    assert written(result)
    assert (store.get_run("r1").wake_at, store.get_run("r1").status) == (at(2), "suspended")
    assert result.wake_at == at(2)  # the wake as written, on every store
    assert store.acquire("r1", OWNER, at(2), at(32))
    seen = Outcome(RunStatus.SUSPENDED, wake_at=at(300), had_waiters=False, cancel_seen=True)
    assert written(store.commit("r1", OWNER, at(3), at(33), TurnWrites(), seen))
    assert store.get_run("r1").wake_at == at(300)


def test_consumed_signals_are_removed_in_the_commit(store: Any, probe: Any) -> None:
    running(store, "r1")
    store.signal("r1", "go", 1, at(1))
    store.signal("r1", "go", 2, at(2))
    first = store.next_signal("r1", "go", [])
    assert first[1] == 1
    writes = creates(record(1, CheckpointKind.SIGNAL, output=1))
    writes.consumed_signals = [first[0]]
    assert written(store.commit("r1", OWNER, at(3), at(33), writes))
    assert probe.signals("r1") == [("go", 2)]
    assert store.next_signal("r1", "go", [])[1] == 2


def test_new_runs_are_inserted_with_the_commit_and_never_overwrite(store: Any) -> None:
    store.create_run(fields("kid-1", input="original"))
    running(store, "r1")
    writes = creates(record(1, CheckpointKind.START_CHILD, output="kid-2"))
    writes.new_runs = [fields("kid-1", input="new", parent_id="r1"), fields("kid-2", parent_id="r1")]
    assert written(store.commit("r1", OWNER, at(1), at(31), writes))
    assert (store.get_run("kid-1").input, store.get_run("kid-1").parent_id) == ("original", None)
    assert (store.get_run("kid-2").status, store.get_run("kid-2").parent_id) == ("pending", "r1")


def test_continue_as_new_inserts_the_successor_with_the_completion(store: Any) -> None:
    running(store, "r1")
    result, _ = finish(store, "r1", output={"continued_as": "r1~1"}, next_run=fields("r1~1", input={"n": 2}))
    assert written(result)
    run, successor = store.get_run("r1"), store.get_run("r1~1")
    assert (run.status, run.continued_to) == ("completed", "r1~1")
    assert (successor.status, successor.input) == ("pending", {"n": 2})


def test_cancelled_siblings_wake_their_waiters(store: Any) -> None:
    store.create_run(fields("kid", parent_id="r1"))
    store.create_run(fields("grandkid", parent_id="kid"))
    suspended(store, "watcher", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "grandkid", 1)])
    running(store, "r1")
    writes = TurnWrites(cancel_runs=["kid"])
    outcome = Outcome(RunStatus.SUSPENDED, wake_at=at(300), had_waiters=False)
    result = store.commit("r1", OWNER, at(4), at(34), writes, outcome)
    assert written(result)
    assert (store.get_run("kid").status, store.get_run("grandkid").status) == ("cancelled", "cancelled")
    assert sorted(result.cancelled) == ["grandkid", "kid"]  # announced after commit
    assert woken(result, outcome) == ["watcher"]
    assert store.get_run("watcher").wake_at == at(4)


def test_a_terminal_outcome_wakes_the_runs_waiting_on_it(store: Any) -> None:
    running(store, "r1", retry_of="orig")
    suspended(store, "w1", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "r1", 1)])
    suspended(store, "w2", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "orig", 1)])
    outcome = Outcome(RunStatus.COMPLETED, output=1, had_waiters=False, notify=[RUN_TOKEN + "r1", RUN_TOKEN + "orig"])
    result = store.commit("r1", OWNER, at(5), at(35), TurnWrites(), outcome)
    assert woken(result, outcome) == ["w1", "w2"]
    assert (store.get_run("w1").wake_at, store.get_run("w2").wake_at) == (at(5), at(5))


def test_a_terminal_outcome_records_the_lifecycle_owed(store: Any) -> None:
    running(store, "r1")
    result, _ = finish(store, "r1", output=1, lifecycle={"owed": ["sub"]})
    assert written(result)
    run = store.get_run("r1")
    assert (run.lifecycle, run.lifecycle_owed) == ({"owed": ["sub"]}, True)
    assert store.owed_runs(at(1), 10) == ["r1"]


def _final(run_id: str, owner: str = OWNER) -> tuple[str, str, Any, Any, TurnWrites, Outcome]:
    outcome = Outcome(RunStatus.COMPLETED, output=run_id, had_waiters=False, notify=[RUN_TOKEN + run_id])
    return (run_id, owner, at(5), at(35), creates(record(9, CheckpointKind.LOCAL, output=run_id)), outcome)


def test_commit_many_commits_each_run_on_its_own_lease(store: Any) -> None:
    for run_id in ("a", "b", "c"):
        running(store, run_id)
    store.cancel("b", at(1))
    results = store.commit_many([_final("a"), _final("b"), _final("c")])
    assert [written(r) for r in results] == [True, False, True]
    assert [store.get_run(r).status for r in ("a", "b", "c")] == ["completed", "cancelled", "completed"]
    assert [store.get_run(r).output for r in ("a", "b", "c")] == ["a", None, "c"]
    assert (9 in store.load_checkpoints("a"), store.load_checkpoints("b")) == (True, {})


def test_commit_many_refuses_a_run_held_by_another_owner(store: Any) -> None:
    running(store, "a")
    running(store, "b", owner=OTHER)
    results = store.commit_many([_final("a"), _final("b")])
    assert [written(r) for r in results] == [True, False]
    assert (store.get_run("b").status, store.get_run("b").locked_by) == ("running", OTHER)


def test_commit_many_wakes_waiters_of_each_settled_run(store: Any) -> None:
    for run_id in ("a", "b"):
        running(store, run_id)
    suspended(store, "w", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "b", 1)])
    commits = [_final("a"), _final("b")]
    results = store.commit_many(commits)
    assert [woken(r, c[5]) for r, c in zip(results, commits, strict=True)] == [[], ["w"]]
    assert store.get_run("w").wake_at == at(5)


def test_commit_many_of_nothing(store: Any) -> None:
    assert store.commit_many([]) == []


def test_two_waiters_at_one_position_fail_the_whole_commit(store: Any, probe: Any) -> None:
    running(store, "r1")
    signal = record(1, CheckpointKind.SIGNAL, CheckpointStatus.PENDING)
    with pytest.raises(Exception), store.atomic():
        suspend(store, "r1", signal, waiters=[Waiter("a", 1), Waiter("b", 1)])
    run = store.get_run("r1")
    assert (run.status, run.locked_by, store.load_checkpoints("r1"), probe.waiters("r1")) == ("running", OWNER, {}, [])


def _waiting_on_signal(store: Any, run_id: str) -> None:
    """``run_id`` suspended on signal ``go`` at position 1, then a signal buffered and the run leased again."""
    running(store, run_id)
    pending = record(1, CheckpointKind.SIGNAL, CheckpointStatus.PENDING)
    result, _ = suspend(store, run_id, pending, waiters=[Waiter("go", 1)], wake_at=at(300))
    assert written(result)
    assert store.signal(run_id, "go", {"n": 1}, at(2)) is True
    assert store.signal(run_id, "go", {"n": 2}, at(2)) is True
    assert store.acquire(run_id, OWNER, at(3), at(33))


def _take_signal(store: Any, run_id: str) -> TurnWrites:
    """The writes of a turn that takes the oldest buffered ``go``: the signal settles position 1."""
    signal_id, payload = store.next_signal(run_id, "go", [])
    taken = record(1, CheckpointKind.SIGNAL, output=payload, finished_at=at(3))
    return TurnWrites(
        checkpoints=[CheckpointWrite(taken, create=False, expect=(CheckpointStatus.PENDING,))],
        consumed_signals=[signal_id],
    )


def test_a_turn_that_takes_a_signal_and_completes_settles_it_consumes_it_and_clears_its_waiters(
    store: Any, probe: Any
) -> None:
    _waiting_on_signal(store, "r1")
    outcome = Outcome(RunStatus.COMPLETED, output={"n": 1}, notify=[RUN_TOKEN + "r1"])
    result = store.commit("r1", OWNER, at(3), at(33), _take_signal(store, "r1"), outcome)
    assert written(result) and woken(result, outcome) == []
    run = store.get_run("r1")
    assert (run.status, run.output, run.locked_by) == ("completed", {"n": 1}, None)
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.output) == ("completed", {"n": 1})
    assert probe.signals("r1") == [("go", {"n": 2})]  # only the one taken is consumed
    assert probe.waiters("r1") == []


def test_a_signal_taking_commit_without_the_lease_consumes_nothing_and_keeps_the_waiters(
    store: Any, probe: Any
) -> None:
    _waiting_on_signal(store, "r1")
    outcome = Outcome(RunStatus.COMPLETED, output=1, notify=[RUN_TOKEN + "r1"])
    assert written(store.commit("r1", OTHER, at(3), at(33), _take_signal(store, "r1"), outcome)) is False
    assert store.load_checkpoints("r1")[1].status == "pending"
    assert probe.signals("r1") == [("go", {"n": 1}), ("go", {"n": 2})]
    assert probe.waiters("r1") == [("go", 1, None)]
    assert store.get_run("r1").status == "running"


def test_a_signal_taking_suspension_clears_its_waiters_and_still_sees_a_step_that_settled(
    store: Any, probe: Any
) -> None:
    _waiting_on_signal(store, "r1")
    writes = _take_signal(store, "r1")
    writes.checkpoints.append(CheckpointWrite(step(2), create=True))
    assert written(store.commit("r1", OWNER, at(3), at(33), writes))  # a flush: the step is dispatched
    assert store.finish_step("r1", 2, at(4), output="fast") is False  # the run was running: not woken
    outcome = Outcome(RunStatus.SUSPENDED, wake_at=at(300), step_seqs=[2])
    result = store.commit("r1", OWNER, at(5), at(35), TurnWrites(consumed_signals=[]), outcome)
    assert written(result)
    assert (store.get_run("r1").wake_at, wake_of(result, outcome)) == (at(5), at(5))
    assert probe.signals("r1") == [("go", {"n": 2})] and probe.waiters("r1") == []


def test_a_run_that_ends_after_taking_a_signal_wakes_the_runs_that_wait_on_it(store: Any, probe: Any) -> None:
    _waiting_on_signal(store, "r1")
    suspended(store, "w1", wake_at=at(300), waiters=[Waiter(RUN_TOKEN + "r1", 1)])
    assert probe.awaited("r1")
    outcome = Outcome(RunStatus.FAILED, error=ERROR, notify=[RUN_TOKEN + "r1"])
    result = store.commit("r1", OWNER, at(6), at(36), _take_signal(store, "r1"), outcome)
    assert woken(result, outcome) == ["w1"]
    assert store.get_run("w1").wake_at == at(6)
    assert probe.waiters("r1") == [] and probe.waiters("w1") == [(RUN_TOKEN + "r1", 1, None)]


@pytest.mark.parametrize("rows", [40, 3000])
def test_a_commit_of_a_large_fan_out_writes_every_row_once(store: Any, rows: int) -> None:
    """Past a few dozen rows a commit writes its checkpoints from arrays (PostgreSQL): the same rows.

    3,000 steps of about 25 columns each are more parameters than one
    statement may have when each row has its own.
    """
    running(store, "r1")
    created = [step(seq, input={"args": [seq], "kwargs": {}}, queue_key=f"k{seq % 3}") for seq in range(1, rows + 1)]
    assert written(store.commit("r1", OWNER, T0, LEASE, creates(*created)))
    cps = store.load_checkpoints("r1")
    assert [cps[seq] for seq in range(1, rows + 1)] == created
    store.finish_step("r1", 2, at(2), output="landed")
    cancelled = dict(status=CheckpointStatus.FAILED, error=ERROR, finished_at=at(3))
    writes = TurnWrites(
        checkpoints=[
            CheckpointWrite(step(seq, **cancelled), create=False, expect=("pending", "running"))
            for seq in range(1, rows + 1)
        ]
    )
    assert not written(store.commit("r1", OTHER, at(3), at(33), writes))  # not the holder: nothing at all
    assert store.load_checkpoints("r1")[rows].status == "pending"
    assert written(store.commit("r1", OWNER, at(3), at(33), writes))
    cps = store.load_checkpoints("r1")
    assert [cps[seq].status for seq in range(1, rows + 1)].count("failed") == rows - 1
    assert (cps[2].status, cps[2].output) == ("completed", "landed")  # a settled one wins
    assert (cps[rows].error, cps[rows].finished_at, cps[rows].input) == (ERROR, at(3), {"args": [rows], "kwargs": {}})
