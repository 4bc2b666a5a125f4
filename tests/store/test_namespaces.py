"""Store contract: the sweeps' queries of a scoped worker take only its namespaces' runs."""

from __future__ import annotations

from typing import Any

from tests.store.conftest import OTHER, OWNER, at, fields, running, step, suspended


def _world(store: Any) -> None:
    store.create_run(fields("a-pending", namespace="a", created_at=at(-3)))
    store.create_run(fields("b-pending", namespace="b", created_at=at(-2)))
    store.create_run(fields("d-pending", created_at=at(-1)))
    suspended(store, "a-sleeper", namespace="a", wake_at=at(20))
    suspended(store, "b-sleeper", namespace="b", wake_at=at(10))


def test_due_runs_of_namespaces(store: Any) -> None:
    _world(store)
    assert store.due_runs(at(100), 10, namespaces={"a"}) == ["a-pending", "a-sleeper"]
    assert store.due_runs(at(100), 10, namespaces={"b", "default"}) == ["b-pending", "d-pending", "b-sleeper"]
    assert store.due_runs(at(100), 10, namespaces=set()) == []
    assert len(store.due_runs(at(100), 10)) == 5  # unscoped: every namespace


def test_claim_due_runs_of_namespaces_leases_no_other_run(store: Any) -> None:
    _world(store)
    page = store.claim_due_runs(OWNER, at(100), at(130), 10, namespaces={"a"})
    assert [r.id for r in page] == ["a-pending", "a-sleeper"]
    assert {r.locked_by for r in page} == {OWNER}
    # Nothing of another namespace was leased, not even for a moment.
    assert store.get_run("b-pending").status == "pending"
    assert store.get_run("b-sleeper").status == "suspended"
    assert store.claim_due_runs(OTHER, at(100), at(130), 10, namespaces=["c"]) == []
    assert store.claim_due_runs(OTHER, at(100), at(130), 10, namespaces=[]) == []
    # Several namespaces on one page, in due order.
    page = store.claim_due_runs(OTHER, at(100), at(130), 10, namespaces=["b", "default"])
    assert [r.id for r in page] == ["b-pending", "d-pending", "b-sleeper"]


def test_claim_due_runs_unscoped_takes_every_namespace(store: Any) -> None:
    _world(store)
    page = store.claim_due_runs(OWNER, at(100), at(130), 10)
    assert sorted(r.id for r in page) == ["a-pending", "a-sleeper", "b-pending", "b-sleeper", "d-pending"]


def test_due_steps_of_namespaces(store: Any) -> None:
    suspended(store, "ra", step(1, enqueued_at=at(1)), namespace="a")
    suspended(store, "rb", step(1, enqueued_at=at(0)), namespace="b")
    assert store.due_steps(at(10), 10, namespaces={"a"}) == [("ra", 1, None)]
    assert store.due_steps(at(10), 10, namespaces={"b"}) == [("rb", 1, None)]
    assert store.due_steps(at(10), 10, namespaces={"c"}) == []
    assert store.due_steps(at(10), 10) == [("rb", 1, None), ("ra", 1, None)]


def test_orphans_of_namespaces(store: Any) -> None:
    running(store, "ra", namespace="a")
    running(store, "rb", namespace="b")
    assert store.orphans(at(31), 10, namespaces={"a"}) == ["ra"]
    assert store.orphans(at(31), 10, namespaces={"c"}) == []
    assert sorted(store.orphans(at(31), 10)) == ["ra", "rb"]
