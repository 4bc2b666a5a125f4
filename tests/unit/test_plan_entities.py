"""Entities without a database: declaring the two forms, and the plan of one operation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from durable.engine.entities import entity_def
from durable.engine.plan_entities import EntityApplied, entity_call, op_record, plan_entity_op, result_of
from durable.exceptions import ConfigurationError, EntityNotFound, EntityOpFailed, InvalidInput


class Counter:
    def add(self, n: int) -> int:
        before = self.state
        self.state = before + n
        return before

    def get(self) -> int:
        return int(self.state)

    def _helper(self) -> None:  # private: not an operation
        raise AssertionError

    def boom(self, arg: Any) -> None:
        self.state = 10_000
        raise ValueError(f"no {arg}")

    def leak(self) -> object:
        return object()


def put(state: dict[str, Any], arg: dict[str, Any]) -> int:
    state.update(arg)
    return len(state)


def clear(state: dict[str, Any]) -> None:
    state.clear()


COUNTER = entity_def("counter", Counter, 0, 3)
BAG = entity_def("bag", {"put": put, "clear": clear}, dict, 1000)


def call(entity: Any, op: str, arg: Any = None, key: Any = "k") -> Any:
    return entity_call(entity, key, op, arg, op_id="id-1", timeout=None)


def test_a_class_declares_its_public_methods_as_operations() -> None:
    assert sorted(COUNTER.ops) == ["add", "boom", "get", "leak"]
    assert COUNTER.ops["add"].takes_arg and not COUNTER.ops["get"].takes_arg
    assert COUNTER.ops["add"].apply(5, 2) == (7, 5)  # self.state reassigned: the new state


def test_a_dict_declares_its_handlers_which_change_the_state_in_place() -> None:
    state: dict[str, Any] = {"a": 1}
    assert BAG.ops["put"].apply(state, {"b": 2}) == ({"a": 1, "b": 2}, 2)
    assert BAG.initial_state() == {} and BAG.initial_state() is not BAG.initial_state()


def test_bad_declarations_are_refused_at_import() -> None:
    with pytest.raises(ConfigurationError, match="initial must be a dict or a list"):
        entity_def("n", {"put": put}, 0, 10)
    with pytest.raises(ConfigurationError, match="invalid"):
        entity_def("9bad", Counter, 0, 10)
    with pytest.raises(ConfigurationError, match="history"):
        entity_def("h", Counter, 0, 0)
    with pytest.raises(ConfigurationError, match="no operation"):
        entity_def("empty", type("Empty", (), {}), 0, 10)
    with pytest.raises(ConfigurationError, match="no arguments"):
        entity_def("args", type("Args", (), {"__init__": lambda self, x: None, "op": lambda self: 1}), 0, 10)
    with pytest.raises(ConfigurationError, match="JSON"):
        entity_def("j", Counter, object(), 10)
    with pytest.raises(ConfigurationError, match="not callable"):
        entity_def("c", {"x": 1}, dict, 10)


def test_a_call_is_checked_before_anything_is_written() -> None:
    assert call(COUNTER, "add", 2, key=7).key == "7"
    with pytest.raises(EntityNotFound, match="no operation 'nope'"):
        call(COUNTER, "nope")
    with pytest.raises(EntityNotFound):
        call(COUNTER, "_helper")
    with pytest.raises(InvalidInput, match="takes no argument"):
        call(COUNTER, "get", 1)
    with pytest.raises(InvalidInput, match="JSON"):
        call(COUNTER, "add", {1, 2})
    with pytest.raises(InvalidInput, match="key"):
        call(COUNTER, "add", 1, key="")
    with pytest.raises(InvalidInput, match="key"):
        call(COUNTER, "add", 1, key=True)
    with pytest.raises(InvalidInput, match="timeout"):
        entity_call(COUNTER, "k", "add", 1, op_id="x", timeout=-1)


def test_the_plan_applies_the_handler_and_takes_the_next_position() -> None:
    plan = plan_entity_op(call(COUNTER, "add", 2), 5, 4)
    assert (plan.seq, plan.status, plan.result, plan.error, plan.state) == (5, "completed", 5, None, 7)
    assert plan.prune_through == 2  # history 3: positions 3, 4 and 5 stay


def test_a_handler_that_raises_fails_its_op_and_leaves_the_state_as_it_was() -> None:
    plan = plan_entity_op(call(COUNTER, "boom", "way"), 5, 0)
    assert (plan.seq, plan.status, plan.state, plan.result) == (1, "failed", 5, None)
    assert plan.error is not None and (plan.error["type"], plan.error["message"]) == ("ValueError", "no way")
    assert plan.prune_through == 0


def test_a_result_that_is_not_json_fails_the_op() -> None:
    plan = plan_entity_op(call(COUNTER, "leak"), 5, 0)
    assert plan.status == "failed" and plan.error is not None and plan.error["type"] == "InvalidInput"


def test_the_handler_works_on_a_copy_of_the_state() -> None:
    state: dict[str, Any] = {"a": 1}
    plan = plan_entity_op(call(BAG, "put", {"b": 2}), state, 0)
    assert state == {"a": 1} and plan.state == {"a": 1, "b": 2}


def test_result_of_raises_the_recorded_error() -> None:
    plan = plan_entity_op(call(COUNTER, "boom", "x"), 0, 0)
    applied = EntityApplied(op_record(call(COUNTER, "boom", "x"), plan, datetime(2026, 1, 1, tzinfo=UTC)), 0)
    with pytest.raises(EntityOpFailed) as info:
        result_of(applied)
    assert (info.value.name, info.value.key, info.value.op, info.value.error_type) == (
        "counter",
        "k",
        "boom",
        "ValueError",
    )
