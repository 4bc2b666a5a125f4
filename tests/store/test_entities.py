"""Store contract: entity operations (one at a time per key, state and op log row together, bounded log)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from durable.engine.entities import entity_def
from durable.engine.plan_entities import EntityCall, entity_call
from durable.exceptions import EntityTimeout
from tests.store.conftest import T0, at


class Tally:
    def add(self, n: int) -> int:
        before = self.state["total"]
        self.state["total"] = before + n
        self.state["seen"].append(n)
        return before

    def fail(self, why: str) -> None:
        self.state["total"] = -1  # never kept: the op fails
        raise RuntimeError(why)


TALLY = entity_def("tally", Tally, lambda: {"total": 0, "seen": []}, 1000)
SHORT = entity_def("short", Tally, lambda: {"total": 0, "seen": []}, 3)


def op(op_id: str, arg: Any = 1, name: str = "add", key: str = "k", entity: Any = TALLY, **extra: Any) -> EntityCall:
    return entity_call(entity, key, name, arg, op_id=op_id, timeout=extra.pop("timeout", None), **extra)


def test_a_first_op_creates_the_entity_from_its_initial_state(store: Any) -> None:
    assert store.get_entity("tally", "k") is None
    applied = store.apply_entity_op(op("a", 5), T0)
    assert (applied.op.seq, applied.op.status, applied.op.result, applied.replayed) == (1, "completed", 0, False)
    assert applied.state == {"total": 5, "seen": [5]}
    found = store.get_entity("tally", "k")
    assert (found.state, found.ops, found.created_at, found.updated_at) == ({"total": 5, "seen": [5]}, 1, T0, T0)


def test_ops_take_positions_in_order_and_each_sees_the_state_the_last_left(store: Any) -> None:
    results = [store.apply_entity_op(op(f"op{i}", i), at(i)).op for i in range(1, 6)]
    assert [(r.seq, r.result) for r in results] == [(1, 0), (2, 1), (3, 3), (4, 6), (5, 10)]
    assert store.get_entity("tally", "k").state == {"total": 15, "seen": [1, 2, 3, 4, 5]}
    assert store.get_entity("tally", "k").updated_at == at(5)
    log = store.entity_ops("tally", "k", 10)
    assert [(r.seq, r.op_id, r.op, r.arg, r.status, r.created_at) for r in log] == [
        (i, f"op{i}", "add", i, "completed", at(i)) for i in range(5, 0, -1)
    ]
    assert [r.seq for r in store.entity_ops("tally", "k", 2)] == [5, 4]


def test_a_repeated_op_id_is_answered_from_the_log_and_applies_nothing(store: Any) -> None:
    store.apply_entity_op(op("same", 5), T0)
    store.apply_entity_op(op("other", 1), T0)
    again = store.apply_entity_op(op("same", 100), at(1))
    assert (again.replayed, again.op.seq, again.op.result, again.op.arg) == (True, 1, 0, 5)
    entity = store.get_entity("tally", "k")
    assert (entity.ops, entity.state["total"], entity.updated_at) == (2, 6, T0)


def test_a_handler_that_raises_fails_its_op_and_leaves_the_state(store: Any) -> None:
    store.apply_entity_op(op("a", 5), T0)
    failed = store.apply_entity_op(op("b", "bad input", name="fail"), T0)
    assert (failed.op.seq, failed.op.status, failed.op.result) == (2, "failed", None)
    assert (failed.op.error["type"], failed.op.error["message"]) == ("RuntimeError", "bad input")
    assert failed.state == {"total": 5, "seen": [5]}
    # The entity goes on: the next op takes the next position and sees the unchanged state.
    assert store.apply_entity_op(op("c", 1), T0).op.result == 5
    # The failure is recorded: repeating its id answers the failure, it is not run again.
    again = store.apply_entity_op(op("b", "bad input", name="fail"), T0)
    assert again.replayed and again.op.status == "failed" and store.get_entity("tally", "k").ops == 3


def test_keys_and_names_are_separate_entities(store: Any) -> None:
    store.apply_entity_op(op("a", 1, key="k1"), T0)
    store.apply_entity_op(op("a", 2, key="k2"), T0)  # the same op id on another key is another op
    store.apply_entity_op(op("a", 3, key="k1", entity=SHORT), T0)
    assert store.get_entity("tally", "k1").state["total"] == 1
    assert store.get_entity("tally", "k2").state["total"] == 2
    assert store.get_entity("short", "k1").state["total"] == 3
    assert [r.seq for r in store.entity_ops("tally", "k2", 10)] == [1]


def test_the_op_log_keeps_the_newest_history_rows(store: Any) -> None:
    for i in range(1, 8):
        store.apply_entity_op(op(f"op{i}", i, entity=SHORT), T0)
    assert [r.seq for r in store.entity_ops("short", "k", 100)] == [7, 6, 5]
    entity = store.get_entity("short", "k")
    assert (entity.ops, entity.state["total"]) == (7, 28)  # the state keeps every op
    # Out of the window, an op id is new again (the bound is also the deduplication window).
    assert store.apply_entity_op(op("op1", 1, entity=SHORT), T0).replayed is False
    assert store.apply_entity_op(op("op7", 1, entity=SHORT), T0).replayed is True


def test_an_op_whose_state_is_not_json_fails_without_touching_the_state(store: Any) -> None:
    weird = entity_def("weird", {"set": lambda state, arg: state.update(bad=object())}, dict, 10)
    failed = store.apply_entity_op(entity_call(weird, "k", "set", None, op_id="x", timeout=None), T0)
    assert failed.op.status == "failed" and failed.op.error["type"] == "InvalidInput"
    assert store.get_entity("weird", "k").state == {}


def test_a_memory_store_op_waiting_past_its_timeout_writes_nothing() -> None:
    """The database stores' lock waits are tested with real connections (tests/test_entity_races.py)."""
    from durable.store.memory import MemoryStore

    store = MemoryStore()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.atomic():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        with pytest.raises(EntityTimeout, match="stayed locked"):
            store.apply_entity_op(op("late", timeout=0.01), T0)
    finally:
        release.set()
        holder.join()
    assert store.get_entity("tally", "k") is None


def test_the_default_history_keeps_the_last_1000_ops_of_a_key() -> None:
    """The documented bound, at its default (the database stores prune as the contract cases above show)."""
    from durable.engine.entities import HISTORY
    from durable.store.memory import MemoryStore

    store = MemoryStore()
    counter = entity_def("default_bound", Tally, lambda: {"total": 0, "seen": []}, HISTORY)
    for i in range(1, 1003):
        store.apply_entity_op(entity_call(counter, "k", "add", 1, op_id=f"op{i}", timeout=None), T0)
    log = store.entity_ops("default_bound", "k", 5000)
    assert HISTORY == 1000 and len(log) == 1000
    assert (log[0].seq, log[-1].seq) == (1002, 3)
    assert len(store.tables.entity_op_ids) == 1000  # the op id index is pruned with the rows
    assert store.get_entity("default_bound", "k").state["total"] == 1002
