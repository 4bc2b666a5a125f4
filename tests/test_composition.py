"""Composition: children, fan-out, continue-as-new, sagas, events, queries, updates,
patches, search attributes, listing and database transactions (in-process)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group

import durable
from durable import runtime
from durable.models import BufferedEvent, Checkpoint, Run, SignalWaiter
from durable.runtime import registry
from durable.testing import drive, fake_clock, run_until_settled
from tests.timing import settle_advancing

pytestmark = pytest.mark.django_db

calls: Counter[str] = Counter()
undone: list[Any] = []
knobs: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    undone.clear()
    knobs.clear()


# -- workflows -------------------------------------------------------------------


@durable.step
def c_double(x: int) -> int:
    calls["c_double"] += 1
    if x == knobs.get("fail_on"):
        raise durable.FatalError(f"cannot double {x}")
    return 2 * x


@durable.step
def c_refund(input: Any, output: Any) -> None:
    undone.append(("refund", output))


@durable.step(compensate=c_refund)
def c_charge(amount: int) -> dict[str, int]:
    calls["c_charge"] += 1
    return {"charged": amount}


@durable.workflow(name="c_leaf")
def c_leaf(ctx, x):
    if x == knobs.get("leaf_fails"):
        raise ValueError(f"leaf {x} refuses")
    ctx.sleep(knobs.get("leaf_sleep", 0))
    return x * 10


@durable.workflow(name="c_parent")
def c_parent(ctx, xs):
    return [ctx.child(c_leaf, x) for x in xs]


@durable.workflow(name="c_parent_catches")
def c_parent_catches(ctx, x):
    try:
        return ctx.child(c_leaf, x)
    except durable.ChildFailed as exc:
        return {"child": exc.child_id, "status": exc.status, "message": exc.error.get("message")}


@durable.workflow(name="c_bad_child")
def c_bad_child(ctx, what):
    return ctx.child(what, {"x": object} if what == "c_leaf" else None)


@durable.workflow(name="c_fire_and_join")
def c_fire_and_join(ctx):
    child_id = ctx.start_child(c_leaf, 4)
    ctx.local_step("meanwhile", lambda: calls.update(["meanwhile"]))
    return {"id": child_id, "joined": ctx.wait_for_run(child_id)}


@durable.workflow(name="c_fanout")
def c_fanout(ctx, data):
    return ctx.gather(
        *[durable.call(c_double, x) for x in data["xs"]],
        *[durable.child_call(c_leaf, x) for x in data.get("children", [])],
        mode=data.get("mode", "all"),
    )


@durable.workflow(name="c_looper")
def c_looper(ctx, state):
    n = ctx.local_step("count", lambda: state["n"] + 1)
    if n < state["until"]:
        ctx.continue_as_new({"n": n, "until": state["until"]})
    return n


@durable.workflow(name="c_saga")
def c_saga(ctx, data):
    ctx.local_step("reserve", lambda: "R1", compensate=lambda i, o: undone.append(("release", o)))
    ctx.step(c_charge, data["amount"])
    ctx.local_step("note", lambda: "no undo for me")
    if knobs.get("hang"):
        ctx.wait_signal("never")
    ctx.step(c_double, data["ship"])  # fails when knobs["fail_on"] == data["ship"]
    return "shipped"


@durable.workflow(name="c_saga_bad_undo")
def c_saga_bad_undo(ctx):
    def broken_undo(i, o):
        calls["broken_undo"] += 1
        raise RuntimeError("undo failed")

    ctx.local_step("a", lambda: "A", compensate=lambda i, o: undone.append(("undo-a", o)))
    ctx.local_step("b", lambda: "B", compensate=broken_undo)
    raise ValueError("original failure")


@durable.workflow(name="c_events")
def c_events(ctx, match):
    return ctx.wait_event("order.paid", match=match, timeout="1h")


@durable.workflow(name="c_on_paid", on_event=["order.paid"])
def c_on_paid(ctx, payload):
    return {"seen": payload}


@durable.workflow(
    name="c_queries", updates={"set_address": lambda a: a.strip() if a.strip() else int("x"), "anything": None}
)
def c_queries(ctx):
    ctx.set_event("stage", "waiting")
    address = ctx.wait_update("set_address")
    ctx.set_event("stage", "got address")
    ctx.set_event("address", address)
    ctx.sleep("1m")
    return address


@durable.workflow(name="c_patched")
def c_patched(ctx):
    ctx.local_step("one", lambda: 1)
    ctx.sleep("1m")
    if knobs.get("new_code") and ctx.patched("extra-step"):
        ctx.local_step("extra", lambda: calls.update(["extra"]))
    ctx.local_step("two", lambda: 2)
    return "ok"


@durable.workflow(name="c_attrs")
def c_attrs(ctx, data):
    ctx.upsert_search_attributes({"amount": data["amount"], "country": data["country"]})
    ctx.sleep("1h")


@durable.workflow(name="c_tx")
def c_tx(ctx, name):
    def write():
        calls["tx_body"] += 1
        Group.objects.create(name=name)
        if knobs.get("tx_fails"):
            raise RuntimeError("constraint says no")
        return name

    try:
        return ctx.transaction("create_group", write)
    except durable.StepFailed as exc:
        return {"failed": exc.error["message"]}


# -- children --------------------------------------------------------------------


def test_child_outputs_return_in_order_with_deterministic_ids():
    run = run_until_settled(durable.start(c_parent, [1, 2], run_id="par", namespace="shop"))
    assert run.status == "completed" and run.output == [10, 20]
    children = Run.objects.filter(parent_id="par").order_by("id")
    assert [(c.id, c.namespace, c.status) for c in children] == [
        ("par.child.1", "shop", "completed"),
        ("par.child.2", "shop", "completed"),
    ]


def test_a_waited_for_child_is_marked_awaited_and_wakes_its_parent_a_top_level_run_is_not():
    """Completion looks for waiters only on runs some waiter registered for (``Run.awaited``)."""
    knobs["leaf_sleep"] = 60
    with fake_clock() as fc:
        parent = durable.start(c_parent, [1], run_id="aw")
        drive()
        run_until_settled("aw.child.1")  # asleep for a minute
        child = Run.objects.get(id="aw.child.1")
        assert (child.status, child.awaited) == ("suspended", True)
        assert SignalWaiter.objects.filter(run_id="aw", name="__run__:aw.child.1").exists()
        fc.advance("61s")
        run = run_until_settled(parent)
    assert (run.status, run.output) == ("completed", [10])
    assert Run.objects.get(id="aw").awaited is False


def test_failed_child_raises_child_failed_in_the_parent():
    knobs["leaf_fails"] = 3
    run = run_until_settled(durable.start(c_parent_catches, 3, run_id="pc"))
    assert run.output == {"child": "pc.child.1", "status": "failed", "message": "leaf 3 refuses"}


def test_uncaught_child_failure_fails_the_parent():
    knobs["leaf_fails"] = 2
    run = run_until_settled(durable.start(c_parent, [1, 2]))
    assert run.status == "failed" and run.error["type"] == "ChildFailed"


@pytest.mark.parametrize("what", ["no_such_workflow", "c_leaf"])
def test_child_that_cannot_start_fails_the_parent_at_once(what):
    run_id = durable.start(c_bad_child, what)
    drive()
    run = durable.get_run(run_id)
    assert run.status == "failed", "the parent must not be left waiting"
    assert run.error["type"] == "ChildFailed" and "not_started" in run.error["message"]
    assert not Run.objects.filter(parent_id=run_id).exists()
    cp = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert (cp.kind, cp.status, cp.error["code"]) == ("child", "failed", "child_start_failed")


def test_start_child_then_join_it():
    run = run_until_settled(durable.start(c_fire_and_join, run_id="fj"))
    assert run.output == {"id": "fj.child.1", "joined": 40}
    assert calls["meanwhile"] == 1


def test_parent_is_woken_by_its_child_not_by_polling():
    with fake_clock() as fc:
        knobs["leaf_sleep"] = "1h"
        parent = durable.start(c_parent, [5], run_id="pw")
        drive()
        drive()
        assert durable.get_run("pw").status == "suspended"
        assert list(SignalWaiter.objects.filter(run_id="pw").values_list("name", flat=True)) == ["__run__:pw.child.1"]
        fc.advance("1h")
        drive()  # the child wakes, completes, and wakes its parent (due now, not at the reconcile)
        assert Run.objects.get(id="pw").wake_at <= runtime.now()
        run = run_until_settled(parent)
    assert run.output == [50]


def test_cancelling_a_parent_cancels_its_children_recursively():
    @durable.workflow(name="c_grandparent")
    def grandparent(ctx):
        return ctx.child("c_parent", [1])

    try:
        with fake_clock():
            knobs["leaf_sleep"] = "1d"
            run_id = durable.start("c_grandparent", run_id="gp")
            for _ in range(4):
                drive()
            assert Run.objects.filter(status="suspended").count() == 3
            assert durable.cancel("gp") is True
    finally:
        registry.remove("c_grandparent")
    assert dict(Run.objects.values_list("id", "status")) == {
        "gp": "cancelled",
        "gp.child.1": "cancelled",
        "gp.child.1.child.1": "cancelled",
    }
    assert not SignalWaiter.objects.exists()
    assert run_id == "gp"


def test_retry_of_a_failed_child_satisfies_the_requeued_parent():
    knobs["leaf_fails"] = 7
    parent = run_until_settled(durable.start(c_parent, [7], run_id="rp"))
    assert parent.status == "failed"
    knobs.clear()
    retry = durable.retry_with_input("rp.child.1", 8)
    assert run_until_settled(retry).output == 80
    durable.requeue("rp")
    # The requeue also requeues the failed child, which now succeeds.
    run = run_until_settled("rp")
    assert run.status == "completed" and run.output == [70]


# -- fan-out ---------------------------------------------------------------------


def test_gather_dispatches_everything_in_one_turn_and_keeps_order():
    run_id = durable.start(c_fanout, {"xs": [1, 2, 3], "children": [4]})
    from durable.runtime import get_engine

    assert get_engine().run_turn(run_id) == "suspended"
    assert list(Checkpoint.objects.filter(run_id=run_id).values_list("seq", "kind", "status")) == [
        (1, "step", "pending"),
        (2, "step", "pending"),
        (3, "step", "pending"),
        (4, "child", "pending"),
    ]
    run = run_until_settled(run_id)
    assert run.output == [2, 4, 6, 40]
    assert calls["c_double"] == 3


def test_gather_all_reports_every_failure_with_its_index():
    knobs["fail_on"] = 2
    knobs["leaf_fails"] = 9

    @durable.workflow(name="c_gather_catch")
    def catcher(ctx):
        try:
            ctx.gather(durable.call(c_double, 1), durable.call(c_double, 2), durable.child_call(c_leaf, 9))
        except durable.GatherFailed as exc:
            return {"failed": [i for i, _ in exc.failures], "results": exc.results}

    try:
        run = run_until_settled(durable.start("c_gather_catch"))
    finally:
        registry.remove("c_gather_catch")
    assert run.output == {"failed": [1, 2], "results": [2, None, None]}


def test_gather_fail_fast_cancels_unfinished_siblings():
    knobs["fail_on"] = 1
    knobs["leaf_sleep"] = "1d"
    with fake_clock():
        run_id = durable.start(c_fanout, {"xs": [1], "children": [5], "mode": "fail_fast"})
        run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["type"] == "GatherFailed"
    child = Run.objects.get(parent_id=run_id)
    assert child.status == "cancelled"


# -- continue-as-new -----------------------------------------------------------------


def test_continue_as_new_chains_runs_and_get_run_follows():
    run_until_settled(durable.start(c_looper, {"n": 0, "until": 3}, run_id="loop"))
    chain = dict(Run.objects.values_list("id", "continued_to"))
    assert chain == {"loop": "loop~1", "loop~1": "loop~2", "loop~2": None}
    assert durable.get_run("loop").output == {"continued_as": "loop~1"}
    final = durable.get_run("loop", follow=True)
    assert (final.id, final.status, final.output) == ("loop~2", "completed", 3)
    assert durable.wait_for_run("loop", timeout=1).output == 3


# -- sagas -----------------------------------------------------------------------


def test_failure_undoes_completed_steps_in_reverse_order():
    knobs["fail_on"] = 99
    run = run_until_settled(durable.start(c_saga, {"amount": 5, "ship": 99}))
    assert run.status == "failed"
    assert run.error["type"] == "StepFailed"  # the original error is kept
    assert undone == [("refund", {"charged": 5}), ("release", "R1")]
    assert [c["status"] for c in run.error["compensation"]] == ["completed", "completed"]


def test_failing_undo_is_recorded_and_skipped():
    with fake_clock() as clock:  # the undo's retries fall due in fake time
        run = settle_advancing(durable.start(c_saga_bad_undo), clock)
    assert run.status == "failed" and run.error["message"] == "original failure"
    assert calls["broken_undo"] == 3  # first try + 2 retries
    assert undone == [("undo-a", "A")]
    assert [c["status"] for c in run.error["compensation"]] == ["failed", "completed"]


def test_cancel_with_compensation_undoes_and_ends_cancelled():
    knobs["hang"] = True
    run_id = durable.start(c_saga, {"amount": 3, "ship": 1})
    run_until_settled(run_id)
    assert durable.get_run(run_id).status == "suspended"
    assert durable.cancel(run_id, compensate=True) is True
    run = run_until_settled(run_id)
    assert run.status == "cancelled"
    assert undone == [("refund", {"charged": 3}), ("release", "R1")]
    assert calls["c_double"] == 0


# -- named events ------------------------------------------------------------------


def test_event_wakes_matching_waiters_and_starts_subscribers():
    a = durable.start(c_events, {"region": "eu"})
    b = durable.start(c_events, {"region": "us"})
    drive()
    result = durable.publish_event("order.paid", {"region": "eu", "id": 1}, id="evt-1")
    assert result.delivered == [a] and result.started == ["evt-1:c_on_paid"] and not result.buffered
    assert run_until_settled(a).output == {"region": "eu", "id": 1}
    assert durable.get_run(b).status == "suspended"
    assert run_until_settled("evt-1:c_on_paid").output == {"seen": {"region": "eu", "id": 1}}
    again = durable.publish_event("order.paid", {"region": "us"}, id="evt-1")
    assert again.duplicate and again.started == [] and durable.get_run(b).status == "suspended"


def test_event_before_the_wait_is_buffered_once_and_order_respects_matching():
    durable.publish_event("order.paid", {"region": "us", "n": 1}, id="e1")
    durable.publish_event("order.paid", {"region": "eu", "n": 2}, id="e2")
    assert BufferedEvent.objects.filter(consumed=False).count() == 2
    eu = run_until_settled(durable.start(c_events, {"region": "eu"}))
    assert eu.output == {"region": "eu", "n": 2}  # the older non-matching event did not block it
    anyone = run_until_settled(durable.start(c_events, None))
    assert anyone.output == {"region": "us", "n": 1}
    third = run_until_settled(durable.start(c_events, None))
    assert third.status == "suspended"  # each event was taken once


def test_event_wait_times_out():
    with fake_clock() as fc:
        run_id = durable.start(c_events, {"region": "mars"})
        run_until_settled(run_id)
        fc.advance("1h")
        run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["type"] == "SignalTimeout"


# -- queries and updates ---------------------------------------------------------------


def test_set_event_is_readable_while_running_and_after():
    with fake_clock() as fc:
        run_id = durable.start(c_queries)
        run_until_settled(run_id)
        assert durable.get_event(run_id, "stage") == "waiting"
        with pytest.raises(durable.EventNotSet):
            durable.get_event(run_id, "address")
        assert durable.get_event(run_id, "address", default=None) is None
        rejected = durable.update(run_id, "set_address", "   ")
        assert not rejected.accepted and "invalid literal" in rejected.reason
        unknown = durable.update(run_id, "nope", 1)
        assert not unknown.accepted and "no update named 'nope'" in unknown.reason
        assert run_until_settled(run_id).status == "suspended"  # rejected updates changed nothing
        assert durable.update(run_id, "set_address", "  1 Main St ").accepted
        run_until_settled(run_id)
        assert durable.get_event(run_id, "stage") == "got address"
        fc.advance("1m")
        run = run_until_settled(run_id)
    assert run.output == "1 Main St"
    assert durable.get_event(run_id, "address") == "1 Main St"
    done = durable.update(run_id, "set_address", "late")
    assert not done.accepted and "completed" in done.reason


# -- versioning ------------------------------------------------------------------------


def test_patched_keeps_old_runs_on_the_old_path():
    with fake_clock() as fc:
        old = durable.start(c_patched)
        run_until_settled(old)
        knobs["new_code"] = True
        new = durable.start(c_patched)
        run_until_settled(new)
        fc.advance("1m")
        assert run_until_settled(old).status == "completed"
        assert run_until_settled(new).status == "completed"
    # The old run had not reached the patch when the code changed: it takes the new path too.
    assert calls["extra"] == 2
    assert Run.objects.get(id=old).patches == ["extra-step"]


def test_patched_is_false_for_runs_that_already_passed_it():
    with fake_clock() as fc:
        run_id = durable.start(c_patched)
        run_until_settled(run_id)
        fc.advance("1m")
        assert run_until_settled(run_id).status == "completed"

        @durable.workflow(name="c_patched_check")
        def check(ctx):
            ctx.local_step("one", lambda: 1)
            ctx.sleep("1m")
            seen = ctx.patched("late-change")
            ctx.local_step("two", lambda: 2)
            return seen

        try:
            fresh = run_until_settled(durable.start("c_patched_check"))
            assert fresh.status == "suspended"
            fc.advance("1m")
            assert run_until_settled(fresh.id).output is True
            Run.objects.filter(id=fresh.id).update(status="pending", output=None, patches=[])
            assert run_until_settled(fresh.id).output is False  # replay of a history that went past it
        finally:
            registry.remove("c_patched_check")


# -- search attributes and listing -------------------------------------------------------


def test_search_attributes_and_list_runs_filters():
    ids = {}
    with fake_clock() as fc:
        for amount, country in [(5, "PT"), (50, "ES"), (500, "PT")]:
            ids[amount] = durable.start(c_attrs, {"amount": amount, "country": country}, tags=[country.lower()])
            fc.advance("1s")
        plain = durable.start("t_noinput", tags=["pt"])
        drive()
    assert Run.objects.get(id=ids[50]).search_attributes == {"amount": 50, "country": "ES"}

    def found(**filters):
        return [r.id for r in durable.list_runs(**filters).items]

    assert found(attributes={"amount__gte": 50}) == [ids[500], ids[50]]
    assert found(attributes={"country": "PT"}) == [ids[500], ids[5]]
    assert found(attributes={"country__ne": "PT"}) == [ids[50]]  # runs without the attribute never match
    assert found(attributes={"amount__in": [5, 500]}) == [ids[500], ids[5]]
    assert found(tag="pt") == [plain, ids[500], ids[5]]
    assert found(workflow="c_attrs", status="suspended", tag="es") == [ids[50]]
    page = durable.list_runs(workflow="c_attrs", limit=2)
    assert [r.id for r in page.items] == [ids[500], ids[50]]
    rest = durable.list_runs(workflow="c_attrs", limit=2, cursor=page.next_cursor)
    assert [r.id for r in rest.items] == [ids[5]] and rest.next_cursor is None


@pytest.mark.parametrize(
    "bad",
    [
        {"status": "sleeping"},
        {"limit": 0},
        {"limit": 5000},
        {"attributes": {"a__like": 1}},
        {"attributes": {"1bad": 1}},
        {"attributes": {"a__in": 3}},
        {"cursor": "nonsense"},
        {"created_after": "yesterday"},
    ],
)
def test_list_runs_refuses_bad_filters(bad):
    with pytest.raises(durable.InvalidInput):
        durable.list_runs(**bad)


# -- exactly-once database work ----------------------------------------------------------


def test_transaction_commits_business_write_with_its_checkpoint():
    run = run_until_settled(durable.start(c_tx, "team-a"))
    assert run.output == "team-a"
    assert Group.objects.filter(name="team-a").count() == 1
    # Replaying the run does not run the body again.
    Run.objects.filter(id=run.id).update(status="pending")
    assert run_until_settled(run.id).output == "team-a"
    assert calls["tx_body"] == 1


def test_failed_transaction_rolls_back_its_writes():
    knobs["tx_fails"] = True
    run = run_until_settled(durable.start(c_tx, "team-b"))
    assert run.output == {"failed": "constraint says no"}
    assert not Group.objects.filter(name="team-b").exists()
    cp = Checkpoint.objects.get(run_id=run.id, seq=1)
    assert (cp.kind, cp.status) == ("transaction", "failed")


def test_bad_event_and_update_input():
    with pytest.raises(durable.InvalidInput):
        durable.publish_event("", {})
    with pytest.raises(durable.InvalidInput):
        durable.publish_event("x", {"a": object()})
    with pytest.raises(durable.RunNotFound):
        durable.update("missing", "x", 1)
    with pytest.raises(durable.RunNotFound):
        durable.get_event("missing", "k")
    with pytest.raises(durable.InvalidRunState):
        durable.signal(run_until_settled(durable.start("t_noinput")).id, "x")
    assert not BufferedEvent.objects.exists()
    assert runtime.now() - timedelta(seconds=1) < runtime.now()


@durable.step
def c_refund_gathered(input: Any, output: Any) -> None:
    undone.append(("refund-gathered", output))


@durable.workflow(name="c_gather_saga")
def c_gather_saga(ctx):
    ctx.gather(durable.call(c_charge, 7), durable.call(c_double, 2, compensate=c_refund_gathered))
    raise ValueError("after the fan-out")


def test_steps_completed_in_a_gather_are_undone_when_the_run_fails():
    run = run_until_settled(durable.start(c_gather_saga))
    assert run.status == "failed" and run.error["message"] == "after the fan-out"
    assert undone == [("refund-gathered", 4), ("refund", {"charged": 7})]


def test_list_runs_accepts_far_timezone_offsets():
    from datetime import datetime, timezone

    far = datetime(1944, 12, 10, 16, 5, tzinfo=timezone(timedelta(hours=22, minutes=37)))
    assert durable.list_runs(created_after=far).items == []


@durable.workflow(name="c_slow_saga", timeout="1h")
def c_slow_saga(ctx):
    ctx.local_step("book", lambda: "B1", compensate=lambda i, o: undone.append(("unbook", o)))
    ctx.sleep("2h")
    return "never"


def test_execution_timeout_undoes_completed_steps_and_fails():
    with fake_clock() as fc:
        run_id = durable.start(c_slow_saga)
        run_until_settled(run_id)
        fc.advance("61m")
        run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["code"] == "timeout"
    assert undone == [("unbook", "B1")]
    assert [c["status"] for c in run.error["compensation"]] == ["completed"]
