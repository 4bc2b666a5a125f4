"""Store contract: fork_run (a new run holding another run's settled history before a position)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durable.engine.plan_fork import plan_fork
from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidInput, InvalidRunState, RunNotFound
from tests.store.conftest import OWNER, T0, at, creates, fields, finish, record, running, step


def finished_origin(store: Any, run_id: str = "orig", status: str = RunStatus.FAILED) -> None:
    """A finished run: 1 completed local, 2 completed step (claimed, a timer due), 3 failed step, 4 pending step."""
    running(store, run_id, patches=["p1"], search_attributes={"k": "v"})
    writes = creates(
        record(1, CheckpointKind.LOCAL, output="one", started_at=T0, finished_at=at(1)),
        step(2, CheckpointStatus.COMPLETED, output={"two": 2}, attempts=1, locked_by="w1", wake_at=at(60)),
        step(3, CheckpointStatus.FAILED, error={"message": "boom"}, attempts=3, retry_at=at(90)),
        step(4),
    )
    assert store.commit(run_id, OWNER, T0, T0 + timedelta(seconds=30), writes, None)
    result, _ = finish(store, run_id, status)
    assert result


def plan(store: Any, from_seq: int, new_id: str = "fork1", origin: str = "orig") -> Any:
    return plan_fork(store.get_run(origin), from_seq, fields(new_id, input={"new": True}))


def test_fork_run_copies_the_settled_checkpoints_before_the_position_without_execution_state(store: Any) -> None:
    finished_origin(store)
    assert store.fork_run(plan(store, 5)) is True
    run = store.get_run("fork1")
    assert (run.status, run.forked_from, run.forked_at_seq, run.turns) == ("pending", "orig", 5, 1)
    assert (run.input, run.patches, run.locked_by) == ({"new": True}, ["p1"], None)
    history = store.load_checkpoints("fork1")
    assert sorted(history) == [1, 2, 3]  # position 4 never settled: the fork executes it again
    one, two, three = history[1], history[2], history[3]
    assert (one.kind, one.status, one.output, one.started_at, one.finished_at) == (
        "local",
        "completed",
        "one",
        T0,
        at(1),
    )
    assert (two.status, two.output, two.attempts, two.locked_by, two.wake_at) == (
        "completed",
        {"two": 2},
        1,
        None,
        None,
    )
    assert (three.status, three.error, three.attempts, three.retry_at) == ("failed", {"message": "boom"}, 3, None)
    assert three.input == {"args": [3], "kwargs": {}}


def test_fork_run_leaves_the_origin_as_it_was(store: Any) -> None:
    finished_origin(store)
    before, history = store.get_run("orig"), store.load_checkpoints("orig")
    assert store.fork_run(plan(store, 3))
    assert store.get_run("orig") == before
    assert store.load_checkpoints("orig") == history
    assert sorted(store.load_checkpoints("fork1")) == [1, 2]


def test_a_fork_is_taken_like_any_pending_run_and_its_first_turn_sees_the_copied_history(store: Any) -> None:
    finished_origin(store)
    store.fork_run(plan(store, 2))
    run = store.acquire("fork1", OWNER, at(5), at(35))
    assert (run.status, run.turns) == ("running", 2)  # past turn 1: a turn reads its history
    assert sorted(store.load_checkpoints("fork1")) == [1]
    # and it writes on from the copied position like any run
    assert store.commit("fork1", OWNER, at(5), at(35), creates(record(2, CheckpointKind.NOW, output="t")), None)
    assert sorted(store.load_checkpoints("fork1")) == [1, 2]


def test_fork_run_is_idempotent_on_the_new_id(store: Any) -> None:
    finished_origin(store)
    assert store.fork_run(plan(store, 3)) is True
    assert store.fork_run(plan(store, 2)) is False
    assert sorted(store.load_checkpoints("fork1")) == [1, 2]  # the second plan wrote nothing
    assert store.get_run("fork1").forked_at_seq == 3


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.DEAD])
def test_fork_run_takes_any_terminal_status(store: Any, status: str) -> None:
    finished_origin(store, status=status)
    assert store.fork_run(plan(store, 2))


def test_fork_run_refuses_an_active_origin_and_writes_nothing(store: Any) -> None:
    running(store, "orig")
    with pytest.raises(InvalidRunState, match="only a finished run"):
        store.fork_run(plan(store, 1))
    assert store.get_run("fork1") is None


def test_fork_run_refuses_an_origin_that_moved_on_since_the_plan(store: Any) -> None:
    finished_origin(store)
    made = plan(store, 2)
    store.requeue("orig", at(9), None)
    with pytest.raises(InvalidRunState, match="pending"):
        store.fork_run(made)
    assert store.get_run("fork1") is None


def test_fork_run_refuses_an_unknown_origin_or_a_position_past_the_end(store: Any) -> None:
    finished_origin(store)
    with pytest.raises(InvalidInput, match="between 1 and 5"):
        store.fork_run(plan(store, 6))
    assert store.get_run("fork1") is None
    made = plan(store, 1)
    with pytest.raises(RunNotFound):
        store.fork_run(type(made)("nope", 1, made.run))
    assert store.get_run("fork1") is None
