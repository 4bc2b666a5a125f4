"""Entities through the public API and from workflows (any database): the two forms, errors, replay."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

import durable
from durable.models import Checkpoint, Entity, EntityOp
from durable.testing import fake_clock, run_until_settled
from durable.testing.faults import inject_crash

pytestmark = pytest.mark.django_db

applied: list[Any] = []
flags: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    applied.clear()
    flags.clear()


@durable.entity("t_account", initial={"balance": 0})
class Account:
    def deposit(self, amount: int) -> int:
        applied.append(("deposit", amount))
        self.state["balance"] += amount
        return int(self.state["balance"])

    def withdraw(self, amount: int) -> int:
        if amount > self.state["balance"]:
            raise ValueError(f"balance {self.state['balance']} is below {amount}")
        self.state["balance"] -= amount
        return int(self.state["balance"])

    def balance(self) -> int:
        return int(self.state["balance"])


@durable.entity("t_counter", initial=0)
class Counter:
    def add(self, n: int) -> int:
        applied.append(("add", n))
        before = int(self.state)
        self.state = before + n
        return before


def _add_item(state: dict[str, Any], item: str) -> int:
    state.setdefault("items", []).append(item)
    return len(state["items"])


def _explode(state: dict[str, Any], arg: Any) -> None:
    state["items"] = "spoiled"
    raise KeyError("exploded")


CART = durable.entity("t_cart", initial=dict)({"add": _add_item, "explode": _explode})


def ops(name: str, key: str) -> list[tuple[int, str, str, Any]]:
    rows = EntityOp.objects.filter(entity__name=name, entity__key=key).order_by("seq")
    return [(r.seq, r.op, r.status, r.result) for r in rows]


# -- from Python ---------------------------------------------------------------------------


def test_call_entity_applies_class_operations_in_order_and_returns_their_results() -> None:
    assert durable.get_entity_state("t_account", "ada") == {"balance": 0}
    assert not Entity.objects.exists()  # reading an untouched key writes nothing
    assert durable.call_entity("t_account", "ada", "deposit", 30) == 30
    assert durable.call_entity(Account, "ada", "withdraw", 10) == 20  # the class works as the name
    assert durable.call_entity("t_account", "ada", "balance") == 20
    assert durable.get_entity_state("t_account", "ada") == {"balance": 20}
    assert durable.get_entity_state("t_account", "bob") == {"balance": 0}
    assert ops("t_account", "ada") == [
        (1, "deposit", "completed", 30),
        (2, "withdraw", "completed", 20),
        (3, "balance", "completed", 20),
    ]
    assert [r.seq for r in durable.entity_ops("t_account", "ada", limit=2)] == [3, 2]


def test_a_dict_entity_changes_its_state_in_place_and_signal_entity_applies_without_a_result() -> None:
    assert durable.call_entity("t_cart", "c1", "add", "apple") == 1
    assert durable.signal_entity("t_cart", "c1", "add", "pear") is None
    assert durable.get_entity_state("t_cart", "c1") == {"items": ["apple", "pear"]}
    assert CART == {"add": _add_item, "explode": _explode}  # returned unchanged


def test_a_handler_that_raises_fails_only_its_op() -> None:
    durable.call_entity("t_account", "eve", "deposit", 5)
    with pytest.raises(durable.EntityOpFailed) as info:
        durable.call_entity("t_account", "eve", "withdraw", 50)
    err = info.value
    assert (err.name, err.key, err.op, err.error_type) == ("t_account", "eve", "withdraw", "ValueError")
    assert err.message == "balance 5 is below 50" and "Traceback" in err.error["traceback"]
    assert durable.get_entity_state("t_account", "eve") == {"balance": 5}
    assert durable.call_entity("t_account", "eve", "deposit", 1) == 6  # the entity goes on
    assert [row[2] for row in ops("t_account", "eve")] == ["completed", "failed", "completed"]
    # A signal records the failure on its op and does not raise it.
    durable.signal_entity("t_cart", "c2", "explode")
    assert durable.get_entity_state("t_cart", "c2") == {}
    assert ops("t_cart", "c2") == [(1, "explode", "failed", None)]
    assert EntityOp.objects.get(entity__key="c2").error["type"] == "KeyError"


def test_bad_names_and_arguments_are_refused_before_anything_is_written() -> None:
    with pytest.raises(durable.EntityNotFound, match="no entity named 'nope'"):
        durable.call_entity("nope", "k", "add", 1)
    with pytest.raises(durable.EntityNotFound, match=r"no operation 'multiply'.*add"):
        durable.call_entity("t_counter", "k", "multiply", 2)
    with pytest.raises(durable.EntityNotFound):
        durable.get_entity_state("nope", "k")
    with pytest.raises(durable.InvalidInput, match="JSON"):
        durable.call_entity("t_counter", "k", "add", object())
    with pytest.raises(durable.InvalidInput, match="takes no argument"):
        durable.call_entity("t_account", "k", "balance", 1)
    with pytest.raises(durable.InvalidInput, match="key"):
        durable.signal_entity("t_counter", ["k"], "add", 1)
    with pytest.raises(durable.InvalidInput, match="op_id"):
        durable.call_entity("t_counter", "k", "add", 1, op_id="has space")
    assert not Entity.objects.exists() and applied == []


def test_an_op_id_makes_a_call_exactly_once() -> None:
    assert durable.call_entity("t_counter", "k", "add", 5, op_id="order-17") == 0
    assert durable.call_entity("t_counter", "k", "add", 5, op_id="order-17") == 0  # answered from the log
    assert durable.get_entity_state("t_counter", "k") == 5 and applied == [("add", 5)]


def test_an_op_inside_a_rolled_back_transaction_is_not_applied() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        durable.call_entity("t_counter", "k", "add", 5)
        raise RuntimeError("the caller's writes roll back")
    assert durable.get_entity_state("t_counter", "k") == 0
    assert not EntityOp.objects.exists()


# -- from workflows ----------------------------------------------------------------------


@durable.workflow(name="t_pay")
def t_pay(ctx: Any, amount: int) -> dict[str, Any]:
    balance = ctx.call_entity("t_account", "shop", "deposit", amount)
    ctx.signal_entity("t_counter", "payments", "add", 1)
    try:
        ctx.call_entity("t_account", "shop", "withdraw", 1_000_000)
        refused = None
    except durable.EntityOpFailed as exc:
        refused = exc.error_type
    ctx.local_step("t_pay.note", lambda: "noted")
    confirmed = ctx.wait_signal("confirm")
    return {"balance": balance, "refused": refused, "confirmed": confirmed}


def test_ctx_call_entity_is_checkpointed_and_replayed_without_applying_again() -> None:
    with fake_clock():
        run_id = durable.start(t_pay, 40, run_id="pay-1")
        assert run_until_settled(run_id).status == "suspended"
        durable.signal(run_id, "confirm", "ok")
        run = run_until_settled(run_id)  # a second turn replays every entity op
    assert run.status == "completed", run.error
    assert run.output == {"balance": 40, "refused": "ValueError", "confirmed": "ok"}
    assert applied == [("deposit", 40), ("add", 1)]  # once each, though two turns ran the code
    assert durable.get_entity_state("t_account", "shop") == {"balance": 40}
    assert durable.get_entity_state("t_counter", "payments") == 1
    cps = Checkpoint.objects.filter(run_id=run_id, kind="entity").order_by("seq")
    assert [(c.seq, c.name, c.status, c.output) for c in cps] == [
        (1, "t_account.deposit", "completed", 40),
        (2, "t_counter.add", "completed", None),
        (3, "t_account.withdraw", "failed", None),
    ]
    assert cps[0].input == {"key": "shop", "arg": 40} and cps[2].error["type"] == "ValueError"
    # The op ids are the run's positions, so the entity's log points back at the run.
    logged = EntityOp.objects.filter(entity__key="shop").order_by("seq").values_list("op_id", flat=True)
    assert list(logged) == ["pay-1:1", "pay-1:3"]


def test_a_crash_after_the_entity_op_replays_its_result_and_does_not_apply_it_twice() -> None:
    with fake_clock(), inject_crash("t_pay.note") as crash:
        run_id = durable.start(t_pay, 7, run_id="pay-crash")
        assert run_until_settled(run_id).status == "suspended"  # died once after the note, recovered
    assert crash.hits == 1
    assert applied == [("deposit", 7), ("add", 1)]
    assert durable.get_entity_state("t_account", "shop") == {"balance": 7}
    assert Entity.objects.get(name="t_account", key="shop").ops == 2  # deposit + the refused withdraw


def test_an_op_applied_without_its_checkpoint_is_answered_from_the_log() -> None:
    # As if a turn had applied position 1 and died before recording it: the op id is "<run_id>:<seq>".
    assert durable.call_entity("t_account", "shop", "deposit", 40, op_id="pay-lost:1") == 40
    with fake_clock():
        run_id = durable.start(t_pay, 40, run_id="pay-lost")
        run_until_settled(run_id)
        durable.signal(run_id, "confirm", "ok")
        run = run_until_settled(run_id)
    assert run.output["balance"] == 40
    assert applied == [("deposit", 40), ("add", 1)]  # the workflow's deposit was not applied again
    assert durable.get_entity_state("t_account", "shop") == {"balance": 40}


@durable.workflow(name="t_changing")
def t_changing(ctx: Any) -> int:
    result = ctx.call_entity("t_counter", "c", flags.get("op", "add"), 1)
    ctx.wait_signal("go")
    return int(result)


def test_a_changed_entity_op_under_a_run_in_flight_is_nondeterminism() -> None:
    with fake_clock():
        run_id = durable.start(t_changing)
        run_until_settled(run_id)
        flags["op"] = "other"
        durable.signal(run_id, "go", None)
        run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["code"] == "non_determinism"
    assert "t_counter.other" in run.error["message"] and "t_counter.add" in run.error["message"]
    assert applied == [("add", 1)]


@durable.workflow(name="t_unknown")
def t_unknown(ctx: Any) -> None:
    ctx.call_entity("t_counter", "c", "nope")


def test_an_unknown_op_in_a_workflow_fails_the_run_with_the_clear_error() -> None:
    run = run_until_settled(durable.start(t_unknown))
    assert run.status == "failed" and run.error["type"] == "EntityNotFound"
    assert not Entity.objects.exists()
