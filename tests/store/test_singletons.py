"""Store contract: singleton keys (admission under the key's lock, FIFO queue, slot hand-over)."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.ports import Outcome, TurnWrites
from durable.engine.vocab import RunStatus
from durable.exceptions import QueueFull
from tests.store.conftest import OWNER, T0, at, fields, running

LEASE = 30


def single(run_id: str, key: str = "k", limit: int = 1, **extra: Any) -> dict[str, Any]:
    """A new run of singleton workflow ``wf`` for ``key``."""
    return fields(run_id, singleton_key=key, singleton_limit=limit, **extra)


def status(store: Any, run_id: str) -> str:
    run = store.get_run(run_id)
    return run.status if run is not None else "absent"


def take(store: Any, run_id: str) -> None:
    assert store.acquire(run_id, OWNER, T0, at(LEASE)) is not None


def test_admit_run_admits_up_to_the_limit_then_queues_in_order(store: Any) -> None:
    got = [store.admit_run(single(f"r{i}", limit=2), None, T0) for i in range(4)]
    assert [(a.created, a.status, a.admitted) for a in got] == [
        (True, "pending", ()),
        (True, "pending", ()),
        (True, "queued", ()),
        (True, "queued", ()),
    ]
    runs = [store.get_run(f"r{i}") for i in range(4)]
    assert [r.singleton_seq for r in runs] == [1, 2, 3, 4]
    assert (runs[2].singleton_key, runs[2].singleton_limit) == ("k", 2)
    assert runs[2].error["code"] == "singleton_queued" and runs[0].error is None
    # Another key, another workflow: slots of their own.
    assert store.admit_run(single("other", key="k2"), None, T0).status == "pending"
    assert store.admit_run({**single("wf2"), "workflow": "wf2"}, None, T0).status == "pending"


def test_admit_run_is_idempotent_on_the_run_id_even_with_the_queue_full(store: Any) -> None:
    assert store.admit_run(single("a"), 0, T0).created
    assert store.admit_run(single("a", input={"changed": True}), 0, T0).created is False
    assert store.get_run("a").input == {"x": 1}


def test_admit_run_past_the_queue_depth_raises_and_writes_nothing(store: Any) -> None:
    store.admit_run(single("a"), 1, T0)
    store.admit_run(single("b"), 1, T0)
    with pytest.raises(QueueFull) as info:
        store.admit_run(single("c"), 1, T0)
    assert (info.value.workflow, info.value.key, info.value.limit, info.value.max_queue_depth) == ("wf", "k", 1, 1)
    assert status(store, "c") == "absent"
    # The queue position was not given out either: the next run admitted takes position 3.
    take(store, "a")
    store.commit("a", OWNER, at(1), at(LEASE), TurnWrites(), Outcome(RunStatus.COMPLETED, slot=("wf", "k")))
    assert store.admit_run(single("d"), 1, T0).status == "queued"
    assert store.get_run("d").singleton_seq == 3


def test_a_new_run_never_overtakes_a_waiting_one(store: Any) -> None:
    store.admit_run(single("a"), None, T0)
    store.admit_run(single("b"), None, T0)
    # The holder ends in a write that hands nothing over (a crash between two writes).
    take(store, "a")
    store.commit("a", OWNER, at(1), at(LEASE), TurnWrites(), Outcome(RunStatus.COMPLETED))
    assert status(store, "b") == "queued"
    got = store.admit_run(single("c"), None, at(2))
    assert (got.status, got.admitted) == ("queued", ("b",))
    b = store.get_run("b")
    assert (b.status, b.wake_at, b.error) == ("pending", at(2), None)


def test_a_terminal_commit_with_its_slot_admits_the_oldest_waiting_run(store: Any) -> None:
    for run_id in ("a", "b", "c"):
        store.admit_run(single(run_id), None, T0)
    take(store, "a")
    result = store.commit(
        "a", OWNER, at(5), at(LEASE), TurnWrites(), Outcome(RunStatus.FAILED, had_waiters=False, slot=("wf", "k"))
    )
    assert result.written and "b" in result.woken
    assert [status(store, r) for r in ("a", "b", "c")] == ["failed", "pending", "queued"]
    assert store.get_run("b").wake_at == at(5)


def test_a_refused_terminal_commit_hands_nothing_over(store: Any) -> None:
    store.admit_run(single("a"), None, T0)
    store.admit_run(single("b"), None, T0)
    take(store, "a")
    result = store.commit(
        "a", "someone-else", at(1), at(LEASE), TurnWrites(), Outcome(RunStatus.COMPLETED, slot=("wf", "k"))
    )
    assert not result.written
    assert status(store, "b") == "queued"


def test_cancel_hands_the_slot_over_and_a_queued_run_is_cancelled_outright(store: Any) -> None:
    for run_id in ("a", "b", "c"):
        store.admit_run(single(run_id), None, T0)
    done = store.cancel("c", at(1), compensate=True)  # queued: nothing to undo, nothing freed
    assert done.done and done.cancelled == ("c",)
    assert status(store, "b") == "queued"
    done = store.cancel("a", at(2))
    assert "b" in done.woken
    assert [status(store, r) for r in ("a", "b", "c")] == ["cancelled", "pending", "cancelled"]


def test_notify_settled_hands_over_the_slot_of_a_run_that_settled_outside_a_turn(store: Any) -> None:
    store.admit_run(single("a"), None, T0)
    store.admit_run(single("b"), None, T0)
    take(store, "a")
    assert store.release("a", OWNER, at(1), at(1), True, max_attempts=0) == RunStatus.DEAD
    assert status(store, "b") == "queued"
    assert "b" in store.notify_settled("a", at(2))
    assert status(store, "b") == "pending"


def test_hand_over_admits_into_free_slots_only_and_waiting_keys_lists_keys_with_a_queue(store: Any) -> None:
    for run_id in ("a", "b", "c"):
        store.admit_run(single(run_id), None, T0)
    store.admit_run(single("x", key="k2"), None, T0)
    assert store.waiting_keys(10) == [("wf", "k")]
    assert store.hand_over("wf", "k", at(1)) == []  # a still holds the only slot
    assert store.hand_over("wf", "nope", at(1)) == []
    running_a = store.acquire("a", OWNER, T0, at(LEASE))
    assert running_a is not None and running_a.singleton_key == "k"
    store.commit("a", OWNER, at(1), at(LEASE), TurnWrites(), Outcome(RunStatus.COMPLETED))
    assert store.hand_over("wf", "k", at(2)) == ["b"]
    assert store.hand_over("wf", "k", at(3)) == []
    assert store.waiting_keys(10) == [("wf", "k")]  # c still waits


def test_runs_inserted_by_create_run_and_by_a_commit_are_admitted_to_their_key(store: Any) -> None:
    assert store.create_run(single("a"))
    assert store.create_run(single("b"))
    assert store.create_run(single("b")) is False
    assert [status(store, r) for r in ("a", "b")] == ["pending", "queued"]
    running(store, "parent")
    writes = TurnWrites(new_runs=[single("child", parent_id="parent")])
    outcome = Outcome(RunStatus.SUSPENDED, wake_at=at(60), had_waiters=False)
    assert store.commit("parent", OWNER, T0, at(LEASE), writes, outcome).written
    child = store.get_run("child")
    assert (child.status, child.singleton_seq) == ("queued", 3)


def test_a_requeued_singleton_run_queues_behind_the_waiting_runs(store: Any) -> None:
    store.admit_run(single("a"), None, T0)
    take(store, "a")
    store.commit("a", OWNER, at(1), at(LEASE), TurnWrites(), Outcome(RunStatus.FAILED, slot=("wf", "k")))
    store.admit_run(single("b"), None, T0)
    store.admit_run(single("c"), None, T0)
    assert [status(store, r) for r in ("a", "b", "c")] == ["failed", "pending", "queued"]
    assert store.requeue("a", at(2), None) == ["a"]
    a = store.get_run("a")
    assert (a.status, a.singleton_seq, a.error["code"]) == ("queued", 4, "singleton_queued")
    take(store, "b")
    store.commit("b", OWNER, at(3), at(LEASE), TurnWrites(), Outcome(RunStatus.COMPLETED, slot=("wf", "k")))
    assert [status(store, r) for r in ("a", "c")] == ["queued", "pending"]
    # With its slot free and nobody waiting, a requeued run is admitted at once.
    store.admit_run(single("solo", key="k3"), None, T0)
    take(store, "solo")
    store.commit("solo", OWNER, at(4), at(LEASE), TurnWrites(), Outcome(RunStatus.FAILED, slot=("wf", "k3")))
    store.requeue("solo", at(5), None)
    assert (status(store, "solo"), store.get_run("solo").wake_at) == ("pending", at(5))
