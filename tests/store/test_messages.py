"""Store contract: signals (buffered FIFO per name) and named events (buffered once, with match)."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.ports import Waiter
from durable.engine.vocab import EVENT_TOKEN, CheckpointKind, CheckpointStatus
from durable.exceptions import InvalidRunState, LeaseLost, RunNotFound
from tests.store.conftest import OTHER, OWNER, at, creates, finish, record, running, suspended


def test_a_signal_before_any_wait_is_buffered_once_and_consumed_in_order(store: Any, probe: Any) -> None:
    running(store, "r1")
    assert store.signal("r1", "go", {"n": 1}, at(1)) is False
    assert store.signal("r1", "other", "x", at(2)) is False
    assert store.signal("r1", "go", {"n": 2}, at(3)) is False
    assert probe.signals("r1") == [("go", {"n": 1}), ("other", "x"), ("go", {"n": 2})]
    first = store.next_signal("r1", "go", [])
    second = store.next_signal("r1", "go", [first[0]])
    assert (first[1], second[1]) == ({"n": 1}, {"n": 2})
    assert first[0] < second[0]
    assert store.next_signal("r1", "go", [first[0], second[0]]) is None
    assert store.next_signal("r1", "missing", []) is None
    assert store.next_signal("r1", "go", [])[0] == first[0]  # reading consumes nothing


def test_a_signal_wakes_a_run_suspended_on_that_name_only(store: Any) -> None:
    suspended(
        store,
        "r1",
        record(1, CheckpointKind.SIGNAL, CheckpointStatus.PENDING),
        wake_at=at(300),
        waiters=[Waiter("go", 1)],
    )
    assert store.signal("r1", "other", None, at(4)) is False
    assert store.get_run("r1").wake_at == at(300)
    assert store.signal("r1", "go", [1, 2], at(5)) is True
    run = store.get_run("r1")
    assert (run.wake_at, run.updated_at, run.status) == (at(5), at(5), "suspended")
    assert store.next_signal("r1", "go", [])[1] == [1, 2]


def test_a_signal_to_a_running_run_with_a_waiter_is_buffered_not_woken(store: Any) -> None:
    suspended(store, "r1", wake_at=at(100), waiters=[Waiter("go", 1)])
    assert store.acquire("r1", OWNER, at(100), at(130))
    assert store.signal("r1", "go", 1, at(101)) is False
    assert store.get_run("r1").status == "running"
    assert store.next_signal("r1", "go", [])[1] == 1


def test_signals_to_settled_or_unknown_runs_are_refused(store: Any, probe: Any) -> None:
    running(store, "r1")
    finish(store, "r1")
    with pytest.raises(InvalidRunState):
        store.signal("r1", "go", None, at(2))
    with pytest.raises(RunNotFound):
        store.signal("nope", "go", None, at(2))
    assert probe.signals("r1") == []


def _waiting_for_event(store: Any, run_id: str, match: dict[str, Any] | None, seq: int = 1) -> None:
    cp = record(seq, CheckpointKind.EVENT, CheckpointStatus.PENDING, name="paid", input={"match": match})
    suspended(store, run_id, cp, wake_at=at(300), waiters=[Waiter(EVENT_TOKEN + "paid", seq, match)])


def test_publish_delivers_to_every_matching_waiter(store: Any, probe: Any) -> None:
    _waiting_for_event(store, "a", {"order": 1})
    _waiting_for_event(store, "b", None)
    _waiting_for_event(store, "c", {"order": 2})
    got = store.publish_event("paid", {"order": 1, "total": 5}, "ev-1", at(10))
    assert got == {"duplicate": False, "delivered": ["a", "b"], "buffered": False}
    for run_id in ("a", "b"):
        cp = store.load_checkpoints(run_id)[1]
        assert (cp.status, cp.output, cp.finished_at) == ("completed", {"order": 1, "total": 5}, at(10))
        assert probe.waiters(run_id) == []
    assert store.load_checkpoints("c")[1].status == "pending"
    assert probe.waiters("c") == [(EVENT_TOKEN + "paid", 1, {"order": 2})]
    assert probe.events() == [("ev-1", "paid", {"order": 1, "total": 5}, True)]
    assert store.get_run("a").wake_at == at(300)  # the caller wakes the delivered runs (Store.wake)


def test_publish_is_idempotent_on_the_event_id(store: Any) -> None:
    first = store.publish_event("paid", 1, "ev-1", at(1))
    assert first == {"duplicate": False, "delivered": [], "buffered": True}
    _waiting_for_event(store, "a", None)
    assert store.publish_event("paid", 2, "ev-1", at(2)) == {"duplicate": True, "delivered": [], "buffered": False}
    assert store.load_checkpoints("a")[1].status == "pending"


def test_take_event_skips_older_non_matching_events(store: Any, probe: Any) -> None:
    store.publish_event("paid", {"order": 1}, "ev-1", at(1))
    store.publish_event("paid", {"order": 2}, "ev-2", at(2))
    store.publish_event("paid", {"order": 2, "late": True}, "ev-3", at(3))
    running(store, "r1")
    assert store.take_event("r1", OWNER, at(4), at(34), 1, "paid", {"order": 2}, True) == ({"order": 2},)
    cp = store.load_checkpoints("r1")[1]
    assert (cp.kind, cp.status, cp.name, cp.input, cp.output) == (
        "event",
        "completed",
        "paid",
        {"match": {"order": 2}},
        {"order": 2},
    )
    assert (cp.started_at, cp.finished_at) == (at(4), at(4))
    assert store.get_run("r1").locked_until == at(34)
    assert [e[3] for e in probe.events()] == [False, True, False]
    assert store.take_event("r1", OWNER, at(5), at(35), 2, "paid", {"order": 3}, True) is None
    assert store.take_event("r1", OWNER, at(5), at(35), 2, "paid", None, True) == ({"order": 1},)


def test_take_event_settles_an_existing_pending_checkpoint(store: Any) -> None:
    running(store, "r1")
    cp = record(1, CheckpointKind.EVENT, CheckpointStatus.PENDING, name="paid")
    store.commit("r1", OWNER, at(1), at(31), creates(cp))
    store.publish_event("paid", "money", "ev-1", at(2))
    assert store.take_event("r1", OWNER, at(3), at(33), 1, "paid", None, False) == ("money",)
    got = store.load_checkpoints("r1")[1]
    assert (got.status, got.output, got.finished_at) == ("completed", "money", at(3))


def test_take_event_by_a_non_holder_consumes_nothing(store: Any, probe: Any) -> None:
    running(store, "r1")
    assert store.take_event("r1", OTHER, at(1), at(31), 1, "paid", None, True) is None  # nothing buffered
    store.publish_event("paid", "money", "ev-1", at(2))
    with pytest.raises(LeaseLost):
        store.take_event("r1", OTHER, at(3), at(33), 1, "paid", None, True)
    assert probe.events() == [("ev-1", "paid", "money", False)]
    assert store.load_checkpoints("r1") == {}
    assert store.get_run("r1").locked_until == at(30)


def test_a_buffered_event_is_taken_by_one_run_only(store: Any) -> None:
    store.publish_event("paid", "money", "ev-1", at(1))
    running(store, "a")
    running(store, "b")
    assert store.take_event("a", OWNER, at(2), at(32), 1, "paid", None, True) == ("money",)
    assert store.take_event("b", OWNER, at(2), at(32), 1, "paid", None, True) is None
