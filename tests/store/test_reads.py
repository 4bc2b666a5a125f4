"""Store contract: reads of histories, run lists and republish targets; the suite covers every method."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from durable.engine.ports import Store
from durable.engine.vocab import CheckpointKind, RunStatus
from tests.store.conftest import OWNER, T0, at, creates, fields, finish, record, running

# Methods the service layer calls beyond the protocol (events, lists, repairs, the fleet).
EXTRA = ["publish_event", "wake", "list_runs", "republish_targets", "advertise", "refresh_worker", "retire_worker"]
EXTRA += ["live_workers", "prune_workers"]


def test_the_contract_suite_calls_every_store_method() -> None:
    protocol = [name for name, value in vars(Store).items() if not name.startswith("_") and callable(value)]
    text = "".join(path.read_text() for path in Path(__file__).parent.glob("test_*.py"))
    called = set(re.findall(r"store\.(\w+)\(", text))
    assert sorted(set(protocol + EXTRA) - called) == []


def test_load_histories_reads_several_runs_at_once(store: Any) -> None:
    for run_id in ("a", "b", "empty"):
        running(store, run_id)
    store.commit("a", OWNER, T0, at(30), creates(record(2, CheckpointKind.NOW), record(1, CheckpointKind.UUID)))
    store.commit("b", OWNER, T0, at(30), creates(record(1, CheckpointKind.LOCAL, output={"v": 1})))
    got = store.load_histories(["a", "b", "empty", "nope"])
    assert sorted(got) == ["a", "b"]
    assert (list(got["a"]), [cp.kind for cp in got["a"].values()]) == ([1, 2], ["uuid", "now"])
    assert got["b"][1].output == {"v": 1}
    assert got["a"] == store.load_checkpoints("a")
    assert store.load_histories([]) == {}


def test_load_delta_reads_the_positions_asked_and_those_past_one_with_the_runs_count(store: Any) -> None:
    running(store, "a")
    running(store, "empty")
    cps = [record(i, CheckpointKind.LOCAL, output={"v": i}, started_at=at(i)) for i in range(1, 6)]
    store.commit("a", OWNER, T0, at(30), creates(*cps))
    got = store.load_delta("a", [2, 3, 9], 4)
    assert (list(got.records), got.total) == ([2, 3, 5], 5)
    full = store.load_checkpoints("a")
    assert got.records == {seq: full[seq] for seq in (2, 3, 5)}
    assert got.records[5].output == {"v": 5} and got.records[5].started_at == at(5)
    nothing = store.load_delta("a", [], 5)
    assert (nothing.records, nothing.total) == ({}, 5)
    none = store.load_delta("empty", [1], 0)
    assert (none.records, none.total) == ({}, 0)


def _listed(store: Any, **filters: Any) -> list[str]:
    query: dict[str, Any] = {
        "statuses": [],
        "workflow": None,
        "namespace": None,
        "tag": None,
        "attributes": [],
        "created_after": None,
        "created_before": None,
        "after": None,
        "limit": 50,
    }
    query.update(filters)
    return [run.id for run in store.list_runs(**query)]


def _catalogue(store: Any) -> None:
    store.create_run(fields("r1", workflow="a", tags=["x"], search_attributes={"n": 1, "s": "b"}, created_at=at(1)))
    store.create_run(fields("r2", workflow="b", namespace="ns", tags=["x", "y"], created_at=at(2)))
    store.create_run(fields("r3", workflow="a", search_attributes={"n": 5, "s": "a"}, created_at=at(3)))
    store.create_run(fields("r4", workflow="a", tags=["y"], search_attributes={"n": 3}, created_at=at(3)))
    running(store, "r5", workflow="b", created_at=at(4))
    finish(store, "r5")


def test_list_runs_filters_and_orders_newest_first(store: Any) -> None:
    _catalogue(store)
    assert _listed(store) == ["r5", "r4", "r3", "r2", "r1"]
    assert _listed(store, statuses=[RunStatus.COMPLETED]) == ["r5"]
    assert _listed(store, statuses=[RunStatus.PENDING], workflow="a") == ["r4", "r3", "r1"]
    assert _listed(store, namespace="ns") == ["r2"]
    assert _listed(store, tag="x") == ["r2", "r1"]
    assert _listed(store, created_after=at(2), created_before=at(4)) == ["r4", "r3", "r2"]
    assert _listed(store, limit=2) == ["r5", "r4"]


def test_list_runs_compares_search_attributes(store: Any) -> None:
    _catalogue(store)
    assert _listed(store, attributes=[("n", "eq", 5)]) == ["r3"]
    assert _listed(store, attributes=[("n", "ne", 5)]) == ["r4", "r1"]
    assert _listed(store, attributes=[("n", "gte", 3)]) == ["r4", "r3"]
    assert _listed(store, attributes=[("n", "lt", 3)]) == ["r1"]
    assert _listed(store, attributes=[("n", "in", [1, 3])]) == ["r4", "r1"]
    assert _listed(store, attributes=[("s", "gt", "a")]) == ["r1"]
    assert _listed(store, attributes=[("n", "gt", 0), ("s", "eq", "a")]) == ["r3"]


def test_list_runs_pages_by_creation_time_then_id(store: Any) -> None:
    _catalogue(store)
    assert _listed(store, after=(at(3), "r4")) == ["r3", "r2", "r1"]
    assert _listed(store, after=(at(3), "r3")) == ["r2", "r1"]
    assert _listed(store, after=(at(1), "r1")) == []


def test_republish_targets_are_settled_runs_by_finish_time(store: Any) -> None:
    for run_id, workflow, when in (("late", "a", 9), ("early", "a", 2), ("other", "b", 5)):
        running(store, run_id, workflow=workflow)
        finish(store, run_id, now=at(when))
    running(store, "chain", workflow="a")
    finish(store, "chain", now=at(3), next_run=fields("chain~1", workflow="a"))
    running(store, "broke", workflow="a")
    finish(store, "broke", RunStatus.FAILED, now=at(4), error={"code": "x"})
    query: dict[str, Any] = {"run_id": None, "workflow": None, "since": None, "until": None, "limit": 10}
    done = [RunStatus.COMPLETED]
    assert store.republish_targets(statuses=done, **query) == ["early", "other", "late"]
    assert store.republish_targets(statuses=done, **{**query, "workflow": "a"}) == ["early", "late"]
    assert store.republish_targets(statuses=done, **{**query, "since": at(5), "until": at(9)}) == ["other"]
    assert store.republish_targets(statuses=done, **{**query, "run_id": "late"}) == ["late"]
    assert store.republish_targets(statuses=[RunStatus.FAILED], **query) == ["broke"]
    assert store.republish_targets(statuses=done, **{**query, "limit": 1}) == ["early"]
