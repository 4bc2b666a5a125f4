"""Store contract: lifecycle-event delivery (leases on settled runs, accumulators, heal)."""

from __future__ import annotations

from typing import Any

import pytest

from durable.engine.vocab import RunStatus
from durable.exceptions import LeaseLost
from tests.store.conftest import OTHER, OWNER, at, fields, finish, running

ERROR = {"message": "no", "code": "x", "retryable": False, "type": "E", "traceback": None}


def _settled(store: Any, run_id: str, status: str = RunStatus.COMPLETED, **extra: Any) -> None:
    running(store, run_id, **extra)
    finish(store, run_id, status, error=ERROR if status != RunStatus.COMPLETED else None, lifecycle={"owed": ["sub"]})


def test_take_lifecycle_lease_holds_a_settled_run_until_it_expires(store: Any) -> None:
    _settled(store, "r1")
    run = store.take_lifecycle_lease("r1", OWNER, at(2), at(32))
    assert (run.id, run.status, run.locked_by, run.locked_until, run.lifecycle) == (
        "r1",
        "completed",
        OWNER,
        at(32),
        {"owed": ["sub"]},
    )
    assert store.take_lifecycle_lease("r1", OTHER, at(32), at(62)) is None
    assert store.take_lifecycle_lease("r1", OTHER, at(33), at(63)).locked_by == OTHER
    running(store, "active")
    assert store.take_lifecycle_lease("active", OTHER, at(100), at(130)) is None
    assert store.take_lifecycle_lease("nope", OTHER, at(100), at(130)) is None


def test_release_lifecycle_lease_only_by_its_holder(store: Any) -> None:
    _settled(store, "r1")
    store.take_lifecycle_lease("r1", OWNER, at(2), at(32))
    store.release_lifecycle_lease("r1", OTHER)
    assert store.get_run("r1").locked_by == OWNER
    store.release_lifecycle_lease("r1", OWNER)
    run = store.get_run("r1")
    assert (run.locked_by, run.locked_until) == (None, None)
    assert store.take_lifecycle_lease("r1", OTHER, at(3), at(33)) is not None


def _batch_run(subscriber: str, batch_id: int, events: list[Any]) -> dict[str, Any]:
    return fields(f"{subscriber}-batch", workflow=subscriber, input={"events": events})


def test_finish_lifecycle_records_delivery_and_starts_subscribers_atomically(store: Any) -> None:
    _settled(store, "r1")
    store.take_lifecycle_lease("r1", OWNER, at(2), at(32))
    record = {"owed": [], "started": {"sub": "sub-run"}}
    created = store.finish_lifecycle("r1", OWNER, at(3), record, [fields("sub-run", workflow="sub")], [], _batch_run)
    assert created == ["sub-run"]
    run = store.get_run("r1")
    assert (run.lifecycle, run.lifecycle_owed) == (record, False)
    assert store.get_run("sub-run").status == "pending"
    assert store.owed_runs(at(10), 10) == []


def test_finish_lifecycle_without_the_lease_writes_nothing(store: Any, probe: Any) -> None:
    _settled(store, "r1")
    store.take_lifecycle_lease("r1", OWNER, at(2), at(32))
    batched = [("digest", {"run": "r1"}, "r1", {"size": 1})]
    with pytest.raises(LeaseLost):
        store.finish_lifecycle("r1", OTHER, at(3), {"owed": []}, [fields("sub-run")], batched, _batch_run)
    assert store.get_run("sub-run") is None
    assert (store.get_run("r1").lifecycle, store.get_run("r1").lifecycle_owed) == ({"owed": ["sub"]}, True)
    assert probe.batches() == []


def test_batched_subscribers_accumulate_once_per_source_and_fire_at_their_size(store: Any, probe: Any) -> None:
    for run_id in ("a", "b"):
        _settled(store, run_id)
        store.take_lifecycle_lease(run_id, OWNER, at(2), at(32))
    policy = {"size": 2, "window": 60}
    assert store.finish_lifecycle("a", OWNER, at(3), {}, [], [("digest", "ev-a", "a", policy)], _batch_run) == []
    assert store.finish_lifecycle("a", OWNER, at(4), {}, [], [("digest", "ev-a", "a", policy)], _batch_run) == []
    assert probe.batches() == [("digest", ["ev-a"], ["a"], at(63))]
    created = store.finish_lifecycle("b", OWNER, at(5), {}, [], [("digest", "ev-b", "b", policy)], _batch_run)
    assert created == ["digest-batch"]
    assert probe.batches() == []
    assert store.get_run("digest-batch").input == {"events": ["ev-a", "ev-b"]}


def test_a_debounced_batch_moves_its_fire_time_and_fires_when_due(store: Any, probe: Any) -> None:
    for run_id in ("a", "b"):
        _settled(store, run_id)
        store.take_lifecycle_lease(run_id, OWNER, at(2), at(32))
    policy = {"debounce": 10}
    store.finish_lifecycle("a", OWNER, at(3), {}, [], [("quiet", 1, "a", policy)], _batch_run)
    store.finish_lifecycle("b", OWNER, at(8), {}, [], [("quiet", 2, "b", policy)], _batch_run)
    assert probe.batches() == [("quiet", [1, 2], ["a", "b"], at(18))]
    assert store.fire_due_batches(at(17), 10, _batch_run) == []
    assert store.fire_due_batches(at(18), 10, _batch_run) == ["quiet-batch"]
    assert probe.batches() == []
    assert store.get_run("quiet-batch").input == {"events": [1, 2]}
    assert store.fire_due_batches(at(99), 10, _batch_run) == []


def test_accumulate_feeds_accumulators_without_a_source_run_and_fires_full_batches(store: Any, probe: Any) -> None:
    policy = {"size": 2, "window": 60}
    assert (
        store.accumulate(
            [("digest", "e1", "event-1", policy), ("quiet", "e1", "event-1", {"debounce": 5})], at(1), _batch_run
        )
        == []
    )
    assert store.accumulate([("digest", "e1", "event-1", policy)], at(2), _batch_run) == []  # the same event id
    assert sorted(probe.batches()) == [("digest", ["e1"], ["event-1"], at(61)), ("quiet", ["e1"], ["event-1"], at(6))]
    assert store.accumulate([("digest", "e2", "event-2", policy)], at(3), _batch_run) == ["digest-batch"]
    assert store.get_run("digest-batch").input == {"events": ["e1", "e2"]}
    assert probe.batches() == [("quiet", ["e1"], ["event-1"], at(6))]
    assert store.accumulate([], at(4), _batch_run) == []


def test_a_batch_whose_run_cannot_be_built_stays(store: Any, probe: Any) -> None:
    _settled(store, "a")
    store.take_lifecycle_lease("a", OWNER, at(2), at(32))
    store.finish_lifecycle("a", OWNER, at(3), {}, [], [("gone", 1, "a", {"window": 5})], _batch_run)
    assert store.fire_due_batches(at(8), 10, lambda subscriber, batch_id, events: None) == []
    assert probe.batches() == [("gone", [1], ["a"], at(8))]


def test_owed_runs_lists_settled_runs_still_owing_by_finish_time(store: Any) -> None:
    for run_id, when in (("r1", 3), ("r2", 1), ("r3", 2), ("paid", 0)):
        running(store, run_id)
        finish(store, run_id, now=at(when), lifecycle={"owed": ["sub"]} if run_id != "paid" else None)
    assert store.owed_runs(at(3), 10) == ["r2", "r3", "r1"]
    assert store.owed_runs(at(2), 10) == ["r2", "r3"]
    assert store.owed_runs(at(3), 1) == ["r2"]
    assert store.owed_runs(at(0), 10) == []


def test_settled_since_lists_runs_of_the_workflows_newest_first(store: Any) -> None:
    running(store, "old", workflow="a")
    finish(store, "old")
    running(store, "new", workflow="a")
    finish(store, "new", RunStatus.FAILED, now=at(9), error=ERROR)
    running(store, "other-wf", workflow="b")
    finish(store, "other-wf", now=at(5))
    running(store, "cancelled", workflow="a")
    store.cancel("cancelled", at(5))
    running(store, "chain", workflow="a")
    finish(store, "chain", now=at(6), next_run=fields("chain~1", workflow="a"))
    assert [r.id for r in store.settled_since(["a"], at(1), 10)] == ["new", "old"]
    assert [r.id for r in store.settled_since(["a"], at(2), 10)] == ["new"]
    assert [r.id for r in store.settled_since(["a", "b"], at(1), 2)] == ["new", "other-wf"]


def test_mark_owed_adds_subscribers_to_the_owed_set(store: Any) -> None:
    running(store, "r1")
    finish(store, "r1", lifecycle={"owed": ["b"], "started": {"a": "x"}})
    assert store.mark_owed("r1", ["c", "b", "a"]) is True
    run = store.get_run("r1")
    assert (run.lifecycle, run.lifecycle_owed) == ({"owed": ["a", "b", "c"], "started": {"a": "x"}}, True)
    assert store.mark_owed("nope", ["a"]) is False


def test_each_due_batch_fires_atomically_on_its_own(store: Any, probe: Any) -> None:
    for run_id, subscriber in (("a", "one"), ("b", "two")):
        _settled(store, run_id)
        store.take_lifecycle_lease(run_id, OWNER, at(2), at(32))
        store.finish_lifecycle(run_id, OWNER, at(3), {}, [], [(subscriber, run_id, run_id, {"window": 5})], _batch_run)

    def fails_for_two(subscriber: str, batch_id: int, events: list[Any]) -> dict[str, Any]:
        if subscriber == "two":
            raise RuntimeError("cannot build")
        return _batch_run(subscriber, batch_id, events)

    with pytest.raises(RuntimeError):
        store.fire_due_batches(at(8), 10, fails_for_two)
    left = {batch[0] for batch in probe.batches()}
    assert "two" in left and store.get_run("two-batch") is None
    assert ("one" in left) == (store.get_run("one-batch") is None)  # fired with its batch deleted, or not at all


def test_a_failing_batch_run_undoes_the_whole_delivery(store: Any, probe: Any) -> None:
    _settled(store, "r1")
    store.take_lifecycle_lease("r1", OWNER, at(2), at(32))

    def broken(subscriber: str, batch_id: int, events: list[Any]) -> dict[str, Any]:
        raise RuntimeError("cannot build")

    batched = [("digest", "ev", "r1", {"size": 1})]
    with pytest.raises(RuntimeError), store.atomic():
        store.finish_lifecycle("r1", OWNER, at(3), {"owed": []}, [fields("sub-run")], batched, broken)
    assert store.get_run("sub-run") is None
    assert (store.get_run("r1").lifecycle, store.get_run("r1").lifecycle_owed) == ({"owed": ["sub"]}, True)
    assert probe.batches() == []
