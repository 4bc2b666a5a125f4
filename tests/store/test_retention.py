"""Retention's store methods on every store: selection, protections, claim, export, compare-and-set delete."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from durable.engine.ports import Outcome, Waiter
from durable.engine.retention import ExpiryRule
from durable.engine.vocab import ACTIVE, CheckpointKind, RunStatus
from tests.store.conftest import OTHER, OWNER, T0, at, creates, fields, record, running, suspended

NOW = at(100 * 86400)
CLAIM = NOW + timedelta(minutes=5)
OLD = ExpiryRule(RunStatus.COMPLETED, at(50 * 86400))


def done(store: Any, run_id: str, seconds: float = 60, status: str = RunStatus.COMPLETED, **extra: Any) -> None:
    """A run that finished ``status`` at ``at(seconds)`` with two checkpoints and a buffered signal."""
    running(store, run_id, now=at(seconds - 1), **extra)
    store.signal(run_id, "late", {"n": 1}, at(seconds - 1))
    error = {"message": "boom", "code": "x"} if status != RunStatus.COMPLETED else None
    outcome = Outcome(status, output={"ok": run_id}, error=error, had_waiters=False)
    writes = creates(record(0, CheckpointKind.LOCAL, output=1), record(1, CheckpointKind.NOW, output=2))
    assert store.commit(run_id, OWNER, at(seconds), at(seconds + 30), writes, outcome).written


def ids(runs: list[Any]) -> list[str]:
    return [r.id for r in runs]


def expired(store: Any, rule: ExpiryRule = OLD, limit: int = 100) -> list[Any]:
    return store.expired_runs(rule, NOW, None, limit)


def test_selects_the_rule_s_runs_oldest_first_page_by_page(store: Any) -> None:
    done(store, "b", 300)
    done(store, "a", 200)
    done(store, "c", 400, workflow="other")
    done(store, "f", 250, status=RunStatus.FAILED)
    done(store, "young", 60 * 86400)
    assert ids(expired(store)) == ["a", "b", "c"]
    first = store.expired_runs(OLD, NOW, None, 2)
    assert ids(first) == ["a", "b"]
    last = first[-1]
    assert ids(store.expired_runs(OLD, NOW, (last.finished_at, last.id), 2)) == ["c"]
    only = ExpiryRule(RunStatus.COMPLETED, OLD.cutoff, workflows=("other",))
    assert ids(expired(store, only)) == ["c"]
    others = ExpiryRule(RunStatus.COMPLETED, OLD.cutoff, exclude=("other",))
    assert ids(expired(store, others)) == ["a", "b"]
    assert ids(expired(store, ExpiryRule(RunStatus.FAILED, OLD.cutoff))) == ["f"]


def test_skips_runs_owed_a_lifecycle_event_or_under_a_lease(store: Any) -> None:
    done(store, "owed", 200)
    done(store, "leased", 300)
    done(store, "free", 400)
    assert store.mark_owed("owed", ["subscriber"])
    assert store.take_lifecycle_lease("leased", "publisher", NOW, NOW + timedelta(seconds=30)) is not None
    assert ids(expired(store)) == ["free"]


def test_keeps_the_child_of_an_active_parent(store: Any) -> None:
    suspended(store, "parent")
    done(store, "child", 200, parent_id="parent")
    done(store, "orphan", 300, parent_id="gone")
    done(store, "sibling", 400, parent_id="finished")
    done(store, "finished", 500)
    assert store.needed_runs(expired(store)) == {"child"}


def test_keeps_a_run_another_run_waits_for(store: Any) -> None:
    done(store, "target", 200)
    done(store, "free", 300)
    suspended(
        store,
        "waiter",
        record(0, CheckpointKind.WAIT_RUN, "pending", input={"run_id": "target"}),
        waiters=[Waiter("__run__:target", 0)],
    )
    assert store.needed_runs(expired(store)) == {"target"}


def test_keeps_the_origin_of_an_active_retry_and_a_retry_standing_in_for_a_waited_origin(store: Any) -> None:
    failed = ExpiryRule(RunStatus.FAILED, OLD.cutoff)
    done(store, "origin", 200, status=RunStatus.FAILED)
    assert store.create_run(fields("origin~retry~1", retry_of="origin"))
    done(store, "lone", 300, status=RunStatus.FAILED)
    assert store.needed_runs(expired(store, failed)) == {"origin"}
    # A completed retry of an origin some run waits on stands in for the origin: both kept.
    done(store, "waited", 400, status=RunStatus.FAILED)
    done(store, "waited~retry~1", 500, retry_of="waited")
    done(store, "unwaited~retry~1", 600, retry_of="lone")
    suspended(store, "parent", waiters=[Waiter("__run__:waited", 0)])
    assert "waited" in store.needed_runs(expired(store, failed))
    assert store.needed_runs(expired(store)) == {"waited~retry~1"}


def test_keeps_a_continue_as_new_chain_while_its_latest_run_is_active(store: Any) -> None:
    done(store, "loop.1", 200, continued_to="loop.2")
    done(store, "loop.2", 300, continued_to="loop.3")
    suspended(store, "loop.3")
    done(store, "over.1", 400, continued_to="over.2")
    done(store, "over.2", 500)
    done(store, "cut.1", 600, continued_to="cut.gone")
    assert store.needed_runs(expired(store)) == {"loop.1", "loop.2"}
    # A waiter on a later (finished) run of the chain keeps the whole chain before it.
    suspended(store, "watcher", waiters=[Waiter("__run__:over.2", 0)])
    assert store.needed_runs(expired(store)) == {"loop.1", "loop.2", "over.1", "over.2"}


def test_claims_are_disjoint_and_only_of_finished_free_runs(store: Any) -> None:
    done(store, "a", 200)
    done(store, "b", 300)
    suspended(store, "active")
    assert store.claim_expired(["a", "active", "missing"], OWNER, NOW, CLAIM) == ["a"]
    assert store.claim_expired(["a", "b"], OTHER, NOW, CLAIM) == ["b"]
    assert ids(expired(store)) == []  # both under a claim
    # A claim that lapsed is free again.
    assert store.claim_expired(["a"], OTHER, CLAIM + timedelta(seconds=1), CLAIM + timedelta(minutes=6)) == ["a"]


def test_export_holds_every_row_as_json(store: Any) -> None:
    done(store, "a", 200, tags=["t"])
    [entry] = store.export_runs(["a", "missing"])
    assert entry["run"]["id"] == "a" and entry["run"]["status"] == RunStatus.COMPLETED
    assert entry["run"]["output"] == {"ok": "a"} and entry["run"]["finished_at"] == at(200).isoformat()
    assert [cp["seq"] for cp in entry["checkpoints"]] == [0, 1]
    assert [(s["name"], s["payload"]) for s in entry["buffered_signals"]] == [("late", {"n": 1})]
    assert entry["waiters"] == []
    json.dumps(entry)


def test_evicts_claimed_runs_with_their_rows_and_nothing_else(store: Any, probe: Any) -> None:
    done(store, "a", 200)
    done(store, "b", 300)
    done(store, "kept", 400)
    assert store.claim_expired(["a", "b"], OWNER, NOW, CLAIM) == ["a", "b"]
    evicted = store.evict_runs(["a", "b", "kept"], OWNER)
    assert evicted.runs == {RunStatus.COMPLETED: 2}
    assert evicted.rows["durable_run"] == 2 and evicted.rows["durable_checkpoint"] == 4
    assert evicted.rows["durable_bufferedsignal"] == 2
    assert store.get_run("a") is None and store.get_run("b") is None
    assert store.load_checkpoints("a") == {} and probe.signals("a") == []
    assert store.get_run("kept") is not None and len(store.load_checkpoints("kept")) == 2


def test_evict_is_compare_and_set_on_the_claim_and_on_what_needs_the_run(store: Any) -> None:
    done(store, "theirs", 200)
    done(store, "requeued", 300, status=RunStatus.FAILED)
    done(store, "awaited", 400)
    for rid in ("theirs", "requeued", "awaited"):
        owner = OTHER if rid == "theirs" else OWNER
        assert store.claim_expired([rid], owner, NOW, CLAIM) == [rid]
    store.requeue("requeued", NOW, None)
    # A run registered to wait for it after the claim: the delete re-checks and keeps it.
    suspended(store, "late-waiter", waiters=[Waiter("__run__:awaited", 0)])
    evicted = store.evict_runs(["theirs", "requeued", "awaited"], OWNER)
    assert evicted.count == 0
    run = store.get_run("requeued")
    assert run is not None and run.status in ACTIVE
    kept = store.get_run("awaited")
    assert kept is not None and kept.locked_by is None  # its claim given back
    assert store.get_run("theirs") is not None


def test_release_gives_the_claim_back(store: Any) -> None:
    done(store, "a", 200)
    assert store.claim_expired(["a"], OWNER, NOW, CLAIM) == ["a"]
    store.release_expired(["a"], OTHER)
    assert ids(expired(store)) == []
    store.release_expired(["a"], OWNER)
    assert ids(expired(store)) == ["a"]


@pytest.mark.parametrize("status", [RunStatus.CANCELLED, RunStatus.DEAD])
def test_every_terminal_status_is_selected_by_its_own_rule(store: Any, status: str) -> None:
    assert store.create_run(fields("x", status=status, finished_at=at(200), created_at=T0))
    assert ids(expired(store, ExpiryRule(status, OLD.cutoff))) == ["x"]
    assert ids(expired(store)) == []
