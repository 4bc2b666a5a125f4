"""Singleton plans and declarations, without a database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import durable
from durable.engine.plan_singletons import KeyState, admitted_columns, plan_admission, plan_hand_over
from durable.engine.singletons import singleton_columns
from durable.engine.vocab import RunStatus

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("limit", "state", "expected"),
    [
        (1, KeyState(0, 0, 0), (RunStatus.PENDING, 1, 0)),
        (1, KeyState(1, 0, 7), (RunStatus.QUEUED, 8, 0)),
        (2, KeyState(1, 0, 3), (RunStatus.PENDING, 4, 0)),
        # A free slot nobody handed over goes to the head of the queue, not to the newcomer.
        (1, KeyState(0, 2, 5), (RunStatus.QUEUED, 6, 1)),
        (3, KeyState(0, 2, 5), (RunStatus.PENDING, 6, 2)),
        # More holders than the limit (the limit was lowered): nothing is admitted.
        (1, KeyState(3, 1, 9), (RunStatus.QUEUED, 10, 0)),
    ],
)
def test_plan_admission(limit: int, state: KeyState, expected: tuple[RunStatus, int, int]) -> None:
    plan = plan_admission("wf", "k", limit, None, state)
    assert (plan.status, plan.seq, plan.promote) == expected
    assert (plan.reason is None) == (plan.status == RunStatus.PENDING)
    if plan.reason is not None:
        assert plan.reason["code"] == "singleton_queued" and "'k'" in plan.reason["message"]


def test_plan_admission_refuses_once_holders_and_waiters_reach_limit_plus_depth() -> None:
    assert plan_admission("wf", "k", 2, 1, KeyState(2, 0, 2)).status == RunStatus.QUEUED
    with pytest.raises(durable.QueueFull) as info:
        plan_admission("wf", "k", 2, 1, KeyState(2, 1, 3))
    assert (info.value.workflow, info.value.key, info.value.limit, info.value.max_queue_depth) == ("wf", "k", 2, 1)
    with pytest.raises(durable.QueueFull):
        plan_admission("wf", "k", 1, 0, KeyState(1, 0, 1))
    assert plan_admission("wf", "k", 1, 0, KeyState(0, 0, 1)).status == RunStatus.PENDING


@pytest.mark.parametrize(
    ("limit", "holders", "waiting", "admitted"), [(1, 0, 3, 1), (3, 1, 5, 2), (2, 2, 4, 0), (1, 2, 1, 0), (4, 0, 1, 1)]
)
def test_plan_hand_over(limit: int, holders: int, waiting: int, admitted: int) -> None:
    assert plan_hand_over(limit, holders, waiting) == admitted


def test_an_admitted_run_is_pending_and_due_now() -> None:
    assert admitted_columns(NOW) == {"status": "pending", "wake_at": NOW, "error": None, "updated_at": NOW}


def test_keys_come_from_a_field_or_a_callable() -> None:
    by_field = durable.Singleton(key="customer", limit=2)
    assert singleton_columns(by_field, "wf", {"customer": 42}) == {"singleton_key": "42", "singleton_limit": 2}
    assert singleton_columns(durable.Singleton(key=lambda v: v["a"] + v["b"]), "wf", {"a": "x", "b": "y"}) == {
        "singleton_key": "xy",
        "singleton_limit": 1,
    }
    assert singleton_columns(None, "wf", {"customer": 1}) == {}


@pytest.mark.parametrize(
    ("spec", "value", "message"),
    [
        (durable.Singleton(key="customer"), {"other": 1}, "input field 'customer'"),
        (durable.Singleton(key="customer"), [1, 2], "input field 'customer'"),
        (durable.Singleton(key="customer"), {"customer": None}, "string or an integer"),
        (durable.Singleton(key="customer"), {"customer": True}, "string or an integer"),
        (durable.Singleton(key="customer"), {"customer": ""}, "1 to 200 characters"),
        (durable.Singleton(key="customer"), {"customer": "x" * 201}, "1 to 200 characters"),
        (durable.Singleton(key=lambda v: v["nope"]), {}, "raised KeyError"),
    ],
)
def test_a_run_without_a_usable_key_is_refused(spec: durable.Singleton, value: object, message: str) -> None:
    with pytest.raises(durable.InvalidInput, match=message):
        singleton_columns(spec, "wf", value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key": ""}, "field name or a callable"),
        ({"key": 3}, "field name or a callable"),
        ({"key": "k", "limit": 0}, "positive integer"),
        ({"key": "k", "limit": True}, "positive integer"),
        ({"key": "k", "max_queue_depth": -1}, "integer >= 0"),
        ({"key": "k", "max_queue_depth": 1.5}, "integer >= 0"),
    ],
)
def test_a_malformed_singleton_is_refused_at_declaration(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(durable.ConfigurationError, match=message):
        durable.Singleton(**kwargs)  # type: ignore[arg-type]


def test_the_decorator_takes_only_a_singleton() -> None:
    with pytest.raises(durable.ConfigurationError, match=r"durable\.Singleton"):
        durable.workflow(name="u_bad_singleton", singleton={"key": "k"})(lambda ctx, data: None)  # type: ignore[arg-type]


def test_debounce_or_batch_without_an_event_is_refused_at_registration() -> None:
    with pytest.raises(durable.ConfigurationError, match="give on_event"):
        durable.workflow(name="u_lonely_debounce", debounce="1m")(lambda ctx, data: None)
    with pytest.raises(durable.ConfigurationError, match="give on_event"):
        durable.workflow(name="u_lonely_batch", batch=(3, "1m"))(lambda ctx, data: None)
