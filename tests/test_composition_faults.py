"""Composition primitives under crashes and races, on PostgreSQL.

Each test crashes at one interesting point of a composition primitive and then
counts exactly what exists: one child, one continue-as-new successor, one
subscriber run, each undo at most once per attempt, each fanned-out step once,
each ``ctx.transaction`` write once.

A crash is either a store write that fails once (``OperationalError`` from
``store.commit``/``store._insert_runs``/``store.create_run``: the engine
abandons the turn and hands the run back) or the death of the process
(:class:`Crash`, a ``BaseException`` that escapes the engine and leaves the
run ``running`` under a lease nobody renews; the fake clock then lets that
lease lapse and the orphan sweep takes the run over). Races use real threads,
each on its own connection, with the interleaving forced by a hook on the
store where it matters.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import OperationalError
from django.db.models import Count
from django.test import override_settings

import durable
from durable import runtime
from durable.models import BufferedEvent, Checkpoint, Run, RunStatus, SignalWaiter
from durable.runtime import get_engine
from durable.store import store
from durable.testing import FakeClock, fake_clock, run_until_settled
from durable.transports.manual import ManualTransport
from tests.threads import concurrently, in_other_thread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Races must never lean on the reconcile fallback: make it an hour away.
NO_RECONCILE = {"TRANSPORT": "manual", "LEASE": 30, "RECONCILE_AFTER": "1h"}
SETTLE = 60.0  # real seconds any helper thread or settling run may take (only a stuck one does)


class Crash(BaseException):
    """The process died here: escapes every ``except Exception`` of the engine."""


# -- execution counting ---------------------------------------------------------------

executed: Counter[str] = Counter()
_count_lock = threading.Lock()
# One-shot faults for step / undo bodies: name -> exception to raise on the next call.
faults: dict[str, BaseException] = {}


def count(key: str) -> str:
    """Record one execution of ``key`` (thread-safe) and return ``key``."""
    with _count_lock:
        executed[key] += 1
    return key


def _maybe_fail(key: str) -> None:
    exc = faults.pop(key, None)
    if exc is not None:
        raise exc


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    executed.clear()
    faults.clear()
    yield
    faults.clear()


@pytest.fixture
def turns() -> Iterator[list[tuple[str, str]]]:
    """Every committed turn as ``(run_id, status)``, in order (engine listener)."""
    seen: list[tuple[str, str]] = []

    def listener(status: str, run: Any) -> None:
        seen.append((run.id, status))

    engine = get_engine()
    engine.listeners.add(listener)
    yield seen
    if listener in get_engine().listeners:
        get_engine().listeners.remove(listener)


# -- workflows and steps ------------------------------------------------------------------


@durable.workflow(name="cfx_leaf")
def cfx_leaf(ctx: durable.WorkflowContext, x: int) -> int:
    ctx.local_step("work", count, f"leaf:{ctx.run_id}")
    return x * 10


@durable.workflow(name="cfx_sleepy_leaf")
def cfx_sleepy_leaf(ctx: durable.WorkflowContext, x: int) -> int:
    ctx.sleep("1m")
    ctx.local_step("work", count, f"leaf:{ctx.run_id}")
    return x * 10


@durable.workflow(name="cfx_parent")
def cfx_parent(ctx: durable.WorkflowContext, x: int) -> dict[str, Any]:
    ctx.local_step("before", count, "parent:before")
    out = ctx.child(cfx_leaf, x)
    ctx.local_step("after", count, "parent:after")
    return {"child": out}


def _work_or_crash(key: str) -> str:
    count(key)
    _maybe_fail(key)
    return key


@durable.workflow(name="cfx_starter")
def cfx_starter(ctx: durable.WorkflowContext, x: int) -> dict[str, Any]:
    child_id = ctx.start_child(cfx_leaf, x)
    # Commits the child together with the start_child record, then does work that may die.
    ctx.local_step("meanwhile", _work_or_crash, "starter:meanwhile")
    return {"id": child_id, "joined": ctx.wait_for_run(child_id)}


@durable.workflow(name="cfx_waits_on_sleepy")
def cfx_waits_on_sleepy(ctx: durable.WorkflowContext, x: int) -> int:
    return int(ctx.child(cfx_sleepy_leaf, x))


@durable.workflow(name="cfx_start_then_wait")
def cfx_start_then_wait(ctx: durable.WorkflowContext, x: int) -> Any:
    child_id = ctx.start_child(cfx_leaf, x)
    return ctx.wait_for_run(child_id)


@durable.workflow(name="cfx_start_then_join")
def cfx_start_then_join(ctx: durable.WorkflowContext, x: int) -> Any:
    child_id = ctx.start_child(cfx_leaf, x)
    return ctx.child(cfx_leaf, x, run_id=child_id)


def _next_n(run_id: str, n: int) -> int:
    count(f"count:{run_id}")
    return n + 1


@durable.workflow(name="cfx_looper")
def cfx_looper(ctx: durable.WorkflowContext, state: dict[str, int]) -> dict[str, int]:
    n = ctx.local_step("count", _next_n, ctx.run_id, state["n"])
    if n < state["until"]:
        ctx.continue_as_new({"n": n, "until": state["until"]})
    return {"final": n}


@durable.step(name="cfx_refund", retries=1, backoff=0)  # a worker lost mid-undo costs its one retry
def cfx_refund(input: Any, output: Any) -> dict[str, Any]:
    count("refund")
    return {"refunded": output["charged"]}


@durable.step(name="cfx_charge", compensate=cfx_refund)
def cfx_charge(amount: int) -> dict[str, int]:
    count("charge")
    return {"charged": amount}


@durable.step(name="cfx_ship")
def cfx_ship(what: str) -> None:
    count("ship")
    raise durable.FatalError(f"cannot ship {what}")


def _release(input: Any, output: Any) -> str:
    count("release")
    _maybe_fail("release")
    return f"released {output}"


@durable.workflow(name="cfx_saga")
def cfx_saga(ctx: durable.WorkflowContext, data: dict[str, Any]) -> str:
    ctx.local_step("reserve", count, "reserve", compensate=_release)
    ctx.step(cfx_charge, data["amount"])
    if data.get("hang"):
        ctx.wait_signal("never")
    ctx.step(cfx_ship, data["what"])
    return "shipped"


@durable.workflow(name="cfx_on_shipped", on_event=["cfx.shipped"])
def cfx_on_shipped(ctx: durable.WorkflowContext, payload: dict[str, Any]) -> dict[str, Any]:
    ctx.local_step("notify", count, f"subscriber:{payload['order']}")
    return {"notified": payload["order"]}


@durable.workflow(name="cfx_wait_event")
def cfx_wait_event(ctx: durable.WorkflowContext, data: dict[str, Any]) -> Any:
    return ctx.wait_event(data["name"], match=data.get("match"))


@durable.step(name="cfx_square", retries=1, backoff=0)  # a worker lost mid-step costs its one retry
def cfx_square(x: int) -> int:
    count(f"square:{x}")
    return x * x


@durable.workflow(name="cfx_fanout")
def cfx_fanout(ctx: durable.WorkflowContext, xs: list[int]) -> list[int]:
    return ctx.gather(*[durable.call(cfx_square, x) for x in xs])


def _create_group(name: str) -> str:
    count("tx_body")
    Group.objects.create(name=name)
    return name


@durable.workflow(name="cfx_tx")
def cfx_tx(ctx: durable.WorkflowContext, name: str) -> str:
    made = ctx.transaction("create_group", _create_group, name)
    ctx.local_step("after", _work_or_crash, "tx:after")
    return made


# -- helpers --------------------------------------------------------------------------------


def assert_one_checkpoint_per_seq() -> None:
    dupes = Checkpoint.objects.values("run_id", "seq").annotate(n=Count("id")).filter(n__gt=1)
    assert not dupes.exists(), list(dupes)


def checkpoints(run_id: str) -> list[tuple[int, str, str, str]]:
    return list(Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "kind", "name", "status"))


def assert_orphaned(run_id: str) -> Run:
    """The crash left the run ``running`` under our lease, which nobody renews."""
    row = Run.objects.get(id=run_id)
    assert row.status == RunStatus.RUNNING and row.locked_by == get_engine().owner
    assert row.locked_until is not None and row.locked_until > runtime.now()
    return row


def recover(run_id: str, clock: FakeClock) -> durable.RunInfo:
    """Let every lease and retry back-off lapse and drive the run to its end."""
    clock.advance(get_engine().settings.lease + 1)
    return run_until_settled(run_id)


def fail_once(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    when: Callable[..., bool],
    *,
    exc: BaseException,
    after: bool = False,
) -> list[Any]:
    """Make ``store.<method>`` raise ``exc`` once, on the first call for which ``when(*args)`` holds.

    ``after=False``: raise instead of running it (nothing written). ``after=True``:
    run it, then raise (it took effect, but the caller sees the failure; inside
    an enclosing transaction, that transaction rolls back). Returns the list of
    calls that failed (at most one).
    """
    original = getattr(store, method)
    fired: list[Any] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        hit = not fired and when(*args, **kwargs)
        if hit:
            fired.append(args)
            if not after:
                raise exc
        result = original(*args, **kwargs)
        if hit:
            raise exc
        return result

    monkeypatch.setattr(store, method, flaky)
    return fired


DB_DOWN = OperationalError("server closed the connection unexpectedly")


# -- 1. between starting a child and recording it --------------------------------------------


def _commit_creates_child(run_id, owner, now, lease_until, writes, outcome=None) -> bool:
    return bool(writes.new_runs)


def _inserts_child(rows: list[dict[str, Any]]) -> bool:
    return any(row.get("parent_id") for row in rows)


@pytest.mark.parametrize(
    "crash",
    ["write_fails", "insert_then_rollback", "died_before_commit", "died_after_commit"],
)
def test_crash_around_child_creation_leaves_exactly_one_child(monkeypatch, crash):
    """The child row and the parent's checkpoint recording it commit together: whatever
    fails, after recovery there is one child, it ran once, and the parent gets its output."""
    engine = get_engine()
    with fake_clock() as clock:
        parent = durable.start(cfx_parent, 4, run_id=f"kid-{crash}")
        if crash == "write_fails":
            fired = fail_once(monkeypatch, "commit", _commit_creates_child, exc=DB_DOWN)
            assert engine.run_turn(parent) == "fault"
        elif crash == "insert_then_rollback":
            # The child's INSERT runs inside the turn's commit, then the commit fails.
            fired = fail_once(monkeypatch, "_insert_runs", _inserts_child, exc=DB_DOWN, after=True)
            assert engine.run_turn(parent) == "fault"
        else:
            fired = fail_once(
                monkeypatch, "commit", _commit_creates_child, exc=Crash("killed"), after=crash == "died_after_commit"
            )
            with pytest.raises(Crash):
                engine.run_turn(parent)
        assert len(fired) == 1
        monkeypatch.undo()

        children = Run.objects.filter(parent_id=parent)
        if crash == "died_after_commit":
            # Committed: child and checkpoint exist, only the dispatch was lost with the process.
            assert list(children.values_list("id", "status")) == [(f"{parent}.child.2", "pending")]
            assert Run.objects.get(id=parent).status == "suspended"
        else:
            assert not children.exists(), "the child must not exist without the parent's record of it"
            assert not Checkpoint.objects.filter(run_id=parent, kind="child").exists()
            if crash == "died_before_commit":
                assert_orphaned(parent)
        # A local step whose record was lost with the crashed commit runs again (at-least-once).
        before_runs = 1 if Checkpoint.objects.filter(run_id=parent, seq=1).exists() else 2
        run = recover(parent, clock)

    assert (run.status, run.output) == ("completed", {"child": 40}), run.error
    child_id = f"{parent}.child.2"
    assert list(Run.objects.filter(parent_id=parent).values_list("id", "status")) == [(child_id, "completed")]
    assert executed[f"leaf:{child_id}"] == 1
    assert (executed["parent:before"], executed["parent:after"]) == (before_runs, 1)
    assert checkpoints(parent) == [
        (1, "local", "before", "completed"),
        (2, "child", "cfx_leaf", "completed"),
        (3, "local", "after", "completed"),
    ]
    assert Run.objects.get(id=parent).recovery_attempts == (0 if crash == "died_after_commit" else 1)
    assert_one_checkpoint_per_seq()


def test_process_dying_after_start_child_committed_starts_no_second_child():
    """start_child's record and the child commit in the flush before the next local step;
    the process dies inside that step: replay returns the recorded id, no new child."""
    engine = get_engine()
    faults["starter:meanwhile"] = Crash("killed inside the step after start_child")
    with fake_clock() as clock:
        parent = durable.start(cfx_starter, 3, run_id="starter")
        with pytest.raises(Crash):
            engine.run_turn(parent)
        assert_orphaned(parent)
        assert list(Run.objects.filter(parent_id=parent).values_list("id", flat=True)) == ["starter.child.1"]
        assert checkpoints(parent) == [(1, "start_child", "cfx_leaf", "completed")]
        run = recover(parent, clock)

    assert (run.status, run.output) == ("completed", {"id": "starter.child.1", "joined": 30}), run.error
    assert Run.objects.filter(parent_id=parent).count() == 1
    assert executed["leaf:starter.child.1"] == 1
    assert executed["starter:meanwhile"] == 2  # the local step the process died in runs again (at-least-once)
    assert_one_checkpoint_per_seq()


def test_start_child_then_wait_for_it_in_the_same_turn():
    run = run_until_settled(durable.start(cfx_start_then_wait, 2, run_id="sw"))
    assert (run.status, run.output) == ("completed", 20), run.error
    assert Run.objects.filter(parent_id="sw").count() == 1


def test_start_child_then_join_it_in_the_same_turn():
    with fake_clock() as clock:
        run_id = durable.start(cfx_start_then_join, 2, run_id="sj")
        run = run_until_settled(run_id)
        for _ in range(3):
            if run.is_terminal:
                break
            clock.advance("2s")
            run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", 20), run.error
    assert Run.objects.filter(parent_id="sj").count() == 1


# -- 2. between the next run of continue-as-new and the completion of the current one -----


def _commit_continues(run_id, owner, now, lease_until, writes, outcome=None) -> bool:
    return outcome is not None and outcome.next_run is not None


def _inserts_successor(rows: list[dict[str, Any]]) -> bool:
    return any(row["id"] == "loop~1" for row in rows)


@pytest.mark.parametrize(
    "crash",
    ["write_fails", "insert_then_rollback", "died_before_commit", "died_after_commit"],
)
def test_crash_around_continue_as_new_leaves_exactly_one_successor(monkeypatch, crash):
    engine = get_engine()
    with fake_clock() as clock:
        durable.start(cfx_looper, {"n": 0, "until": 3}, run_id="loop")
        if crash == "write_fails":
            fired = fail_once(monkeypatch, "commit", _commit_continues, exc=DB_DOWN)
            assert engine.run_turn("loop") == "fault"
        elif crash == "insert_then_rollback":
            fired = fail_once(monkeypatch, "_insert_runs", _inserts_successor, exc=DB_DOWN, after=True)
            assert engine.run_turn("loop") == "fault"
        else:
            fired = fail_once(
                monkeypatch, "commit", _commit_continues, exc=Crash("killed"), after=crash == "died_after_commit"
            )
            with pytest.raises(Crash):
                engine.run_turn("loop")
        assert len(fired) == 1
        monkeypatch.undo()

        if crash == "died_after_commit":
            # Successor and completion committed together; only the dispatch was lost.
            assert dict(Run.objects.values_list("id", "status")) == {"loop": "completed", "loop~1": "pending"}
            assert Run.objects.get(id="loop").continued_to == "loop~1"
        else:
            assert not Run.objects.filter(id="loop~1").exists(), "no successor without the completion"
            assert Run.objects.get(id="loop").continued_to is None
            if crash == "died_before_commit":
                assert_orphaned("loop")
        # The link's local step runs again only if its record was lost with the crashed commit.
        first_link_runs = 1 if Checkpoint.objects.filter(run_id="loop", seq=1).exists() else 2
        run = recover("loop", clock)

    assert (run.id, run.status, run.output) == ("loop~2", "completed", {"final": 3}), run.error
    assert dict(Run.objects.values_list("id", "continued_to")) == {"loop": "loop~1", "loop~1": "loop~2", "loop~2": None}
    assert set(Run.objects.values_list("status", flat=True)) == {"completed"}
    assert Run.objects.get(id="loop").output == {"continued_as": "loop~1"}
    assert durable.wait_for_run("loop", timeout=1).output == {"final": 3}
    assert {k: v for k, v in executed.items() if k.startswith("count:")} == {
        "count:loop": first_link_runs,
        "count:loop~1": 1,
        "count:loop~2": 1,
    }
    assert_one_checkpoint_per_seq()


# -- 3. in the middle of a compensation ------------------------------------------------------


def _commit_records_undo(run_id, owner, now, lease_until, writes, outcome=None) -> bool:
    return outcome is None and any(w.record.kind == "compensation" for w in writes.checkpoints)


def _dead_worker_claims_refund(monkeypatch: pytest.MonkeyPatch, run_id: str) -> list[int]:
    """When the refund undo is dispatched, a worker claims it, runs it, and dies before reporting."""
    claimed: list[int] = []
    original = ManualTransport.dispatch_step

    def dispatch_step(self, rid, seq, queue, *, delay=0.0, namespace=None):
        cp = Checkpoint.objects.get(run_id=rid, seq=seq)
        if rid == run_id and cp.name == "cfx_refund" and not claimed:
            now = runtime.now()
            lease = timedelta(seconds=get_engine().settings.step_execution_lease)
            claim = store.claim_step(rid, seq, "dead-worker", now, now + lease)
            assert claim is not None and claim.attempt == 1
            claimed.append(seq)
            cfx_refund(*claim.input["args"], **claim.input["kwargs"])  # ran... and the worker died
            return None
        return original(self, rid, seq, queue, delay=delay)

    monkeypatch.setattr(ManualTransport, "dispatch_step", dispatch_step)
    return claimed


@pytest.mark.parametrize("crash", ["undo_write_fails", "undo_write_lost_after_commit", "died_in_local_undo"])
def test_crash_in_the_middle_of_compensation_undoes_each_step_at_most_once_per_attempt(monkeypatch, turns, crash):
    """charge (dispatched, undo = refund step) and reserve (local, undo = release) complete,
    ship fails. The refund's worker dies after running it; then the release's turn crashes."""
    run_id = f"saga-{crash}"
    claimed = _dead_worker_claims_refund(monkeypatch, run_id)
    with fake_clock() as clock:
        durable.start(cfx_saga, {"amount": 7, "what": "piano"}, run_id=run_id)
        run = run_until_settled(run_id)
        # Failed at ship; the refund undo was dispatched and its worker vanished mid-execution.
        assert run.status == "suspended" and claimed == [4]
        assert checkpoints(run_id)[-2:] == [(3, "step", "cfx_ship", "failed"), (4, "step", "cfx_refund", "running")]
        assert (executed["refund"], executed["release"]) == (1, 0)

        if crash == "died_in_local_undo":
            faults["release"] = Crash("killed inside the local undo")
        else:
            fail_once(monkeypatch, "commit", _commit_records_undo, exc=DB_DOWN, after=crash.endswith("after_commit"))
        # The refund's execution lease lapses: it runs again (same step id), its result
        # resumes the run, which replays to the failure and reaches the local undo.
        clock.advance(get_engine().settings.step_execution_lease + 1)
        if crash == "died_in_local_undo":
            with pytest.raises(Crash):
                run_until_settled(run_id)
            assert_orphaned(run_id)
        else:
            assert run_until_settled(run_id).status == "suspended"  # turn abandoned, handed back
        assert executed["release"] == 1
        run = recover(run_id, clock)

    assert run.status == "failed"
    # The original error is kept, with the compensation report next to it.
    assert run.error["type"] == "StepFailed" and "cannot ship piano" in run.error["message"]
    assert run.error["step"]["name"] == "cfx_ship"
    assert run.error["compensation"] == [
        {"seq": 2, "step": "cfx_charge", "undo": "cfx_refund", "status": "completed"},
        {"seq": 1, "step": "reserve", "undo": "undo:reserve", "status": "completed"},
    ]
    # Executions: refund ran once per attempt (dead worker + the re-delivery), its checkpoint says 2.
    refund_cp = Checkpoint.objects.get(run_id=run_id, seq=4)
    assert (refund_cp.status, refund_cp.attempts) == ("completed", 2)
    assert executed["refund"] == refund_cp.attempts == 2
    # The local undo ran once per turn that attempted it: again only if its record was lost.
    release_runs = 1 if crash == "undo_write_lost_after_commit" else 2
    assert executed["release"] == release_runs
    assert (executed["reserve"], executed["charge"], executed["ship"]) == (1, 1, 1)
    assert checkpoints(run_id)[-1] == (5, "compensation", "undo:reserve", "completed")
    assert Run.objects.get(id=run_id).recovery_attempts == 1
    assert [s for rid, s in turns if rid == run_id][-1] == "failed"
    assert_one_checkpoint_per_seq()


def test_cancel_with_undo_survives_a_dead_undo_worker_and_a_killed_turn(monkeypatch):
    run_id = "saga-cancel"
    engine = get_engine()
    claimed = _dead_worker_claims_refund(monkeypatch, run_id)
    with fake_clock() as clock:
        durable.start(cfx_saga, {"amount": 3, "what": "chair", "hang": True}, run_id=run_id)
        assert run_until_settled(run_id).status == "suspended"  # waiting on a signal that never comes
        assert durable.cancel(run_id, compensate=True) is True
        # One turn by hand, to observe the undo step in flight.
        assert engine.run_turn(run_id) == "suspended"
        assert len(claimed) == 1  # refund dispatched, its worker died
        assert checkpoints(run_id)[2:] == [(3, "signal", "never", "failed"), (4, "step", "cfx_refund", "running")]
        faults["release"] = Crash("killed inside the local undo")
        clock.advance(get_engine().settings.step_execution_lease + 1)
        with pytest.raises(Crash):
            run_until_settled(run_id)
        assert_orphaned(run_id)
        run = recover(run_id, clock)

    assert run.status == "cancelled"
    assert [c["status"] for c in run.error["compensation"]] == ["completed", "completed"]
    assert executed["refund"] == Checkpoint.objects.get(run_id=run_id, seq=claimed[0]).attempts == 2
    assert executed["release"] == 2  # the turn that died in it, and the recovery
    assert executed["ship"] == 0
    assert_one_checkpoint_per_seq()


def test_cancel_with_undo_waiting_on_a_dispatched_undo_is_not_rerun_every_tick(monkeypatch, turns):
    run_id = "saga-cancel-idle"
    claimed = _dead_worker_claims_refund(monkeypatch, run_id)
    with fake_clock() as clock:
        durable.start(cfx_saga, {"amount": 3, "what": "chair", "hang": True}, run_id=run_id)
        assert run_until_settled(run_id).status == "suspended"
        durable.cancel(run_id, compensate=True)
        assert get_engine().run_turn(run_id) == "suspended"
        assert len(claimed) == 1
        before = len(turns)
        run_until_settled(run_id, timeout=1)  # the undo is in flight: nothing is due
        assert len(turns) == before, f"{len(turns) - before} idle replays while the undo was in flight"
        assert Run.objects.get(id=run_id).wake_at > clock.now()


# -- 4. between publishing an event and starting its subscriber -------------------------------


def _is_subscriber(fields: dict[str, Any]) -> bool:
    return fields["workflow"] == "cfx_on_shipped"


@pytest.mark.parametrize("crash", ["subscriber_insert_fails", "caller_dies_after_commit"])
def test_republishing_after_a_crash_starts_one_subscriber_and_delivers_once(monkeypatch, crash):
    waiter = durable.start(cfx_wait_event, {"name": "cfx.shipped", "match": {"order": 1}}, run_id=f"w-{crash}")
    assert run_until_settled(waiter).status == "suspended"
    payload = {"order": 1, "carrier": "ups"}
    sub_id = "ship-1:cfx_on_shipped"

    if crash == "subscriber_insert_fails":
        # The subscriber row is inserted inside publish_event's transaction, then that fails.
        fired = fail_once(monkeypatch, "create_run", _is_subscriber, exc=DB_DOWN, after=True)
        with pytest.raises(OperationalError):
            durable.publish_event("cfx.shipped", payload, id="ship-1")
        assert len(fired) == 1
        # All of it rolled back: no subscriber, no delivery, no record of the event id.
        assert not Run.objects.filter(id=sub_id).exists()
        assert not BufferedEvent.objects.exists()
        assert checkpoints(waiter) == [(1, "event", "cfx.shipped", "pending")]
        assert SignalWaiter.objects.filter(run_id=waiter).count() == 1
    else:
        # Everything commits; the process dies in the after-commit dispatch and the caller retries.
        original = ManualTransport.dispatch_turn
        died: list[str] = []

        def dispatch_turn(self, rid, *, delay=0.0, namespace=None):
            if not died:
                died.append(rid)
                raise Crash("killed right after the publish committed")
            return original(self, rid, delay=delay)

        monkeypatch.setattr(ManualTransport, "dispatch_turn", dispatch_turn)
        with pytest.raises(Crash):
            durable.publish_event("cfx.shipped", payload, id="ship-1")
        assert died
        assert Run.objects.filter(id=sub_id).exists()
    monkeypatch.undo()

    again = durable.publish_event("cfx.shipped", payload, id="ship-1")
    if crash == "subscriber_insert_fails":
        assert (again.duplicate, again.started, again.delivered) == (False, [sub_id], [waiter])
    else:
        assert (again.duplicate, again.started, again.delivered) == (True, [], [])
    third = durable.publish_event("cfx.shipped", payload, id="ship-1")
    assert third.duplicate and third.started == [] and third.delivered == []

    assert run_until_settled(waiter).output == payload
    assert run_until_settled(sub_id).output == {"notified": 1}
    assert Run.objects.filter(workflow="cfx_on_shipped").count() == 1
    assert executed["subscriber:1"] == 1
    assert list(BufferedEvent.objects.values_list("event_id", "consumed")) == [("ship-1", True)]
    assert checkpoints(waiter) == [(1, "event", "cfx.shipped", "completed")]
    # Delivered once: a second waiter with the same match does not get it again.
    late = durable.start(cfx_wait_event, {"name": "cfx.shipped", "match": {"order": 1}})
    assert run_until_settled(late).status == "suspended"
    assert_one_checkpoint_per_seq()


# -- 5. concurrency ------------------------------------------------------------------------------


PUBLISHES = 3


def test_concurrent_publishes_of_one_event_id_start_one_subscriber():
    with override_settings(DURABLE=NO_RECONCILE):
        for i in range(PUBLISHES):
            waiter = durable.start(cfx_wait_event, {"name": "cfx.shipped", "match": {"order": i}}, run_id=f"cw-{i}")
            assert run_until_settled(waiter).status == "suspended"
            payload = {"order": i}
            results = concurrently(4, lambda _k, p=payload, i=i: durable.publish_event("cfx.shipped", p, id=f"c-{i}"))
            fresh = [r for r in results if not r.duplicate]
            assert len(fresh) == 1, results
            assert fresh[0].started == [f"c-{i}:cfx_on_shipped"] and fresh[0].delivered == [waiter]
            assert all(r.started == [] and r.delivered == [] for r in results if r.duplicate)
            assert run_until_settled(waiter, timeout=SETTLE).output == payload
            assert run_until_settled(f"c-{i}:cfx_on_shipped", timeout=SETTLE).output == {"notified": i}
    assert Run.objects.filter(workflow="cfx_on_shipped").count() == PUBLISHES
    assert all(executed[f"subscriber:{i}"] == 1 for i in range(PUBLISHES))
    assert BufferedEvent.objects.filter(consumed=True).count() == PUBLISHES
    assert_one_checkpoint_per_seq()


def test_waiter_registering_while_the_event_is_published_is_woken_once():
    """Free race, many times: the turn registering wait_event vs a publish of a matching event."""
    rng = random.Random(4321)
    iterations = 15
    with override_settings(DURABLE=NO_RECONCILE):
        engine = get_engine()
        for i in range(iterations):
            run_id = durable.start(cfx_wait_event, {"name": "cfx.race", "match": {"i": i}}, run_id=f"race-{i}")
            jitter = rng.uniform(0, 0.006)

            def racer(k: int, run_id: str = run_id, jitter: float = jitter, i: int = i) -> Any:
                if k == 0:
                    return engine.run_turn(run_id)
                time.sleep(jitter)  # spreads the interleavings; correctness does not depend on it
                return durable.publish_event("cfx.race", {"i": i}, id=f"race-evt-{i}")

            concurrently(2, racer)
            # A lost wake would leave the run asleep for the 1h reconcile.
            run = run_until_settled(run_id, timeout=SETTLE)
            assert (run.status, run.output) == ("completed", {"i": i}), f"iteration {i}"
            assert checkpoints(run_id) == [(1, "event", "cfx.race", "completed")]
            assert not SignalWaiter.objects.filter(run_id=run_id).exists()
        # Never delivered twice: each event was consumed exactly once, and nothing is left
        # buffered for a later waiter of any payload.
        assert BufferedEvent.objects.filter(name="cfx.race").count() == iterations
        assert not BufferedEvent.objects.filter(name="cfx.race", consumed=False).exists()
        anyone = durable.start(cfx_wait_event, {"name": "cfx.race"})
        assert run_until_settled(anyone, timeout=1).status == "suspended"
    assert_one_checkpoint_per_seq()


def test_event_delivered_during_a_reconcile_turn_is_not_left_to_the_next_reconcile(monkeypatch):
    with override_settings(DURABLE=NO_RECONCILE), fake_clock() as clock:
        engine = get_engine()
        run_id = durable.start(cfx_wait_event, {"name": "cfx.late", "match": {"k": 1}}, run_id="mid-turn-event")
        assert engine.run_turn(run_id) == "suspended"
        clock.advance(engine.settings.reconcile_after + 1)  # the reconcile turn falls due

        original = store.take_event
        published: list[Any] = []

        def take_then_publish(*args: Any, **kwargs: Any) -> Any:
            got = original(*args, **kwargs)  # nothing buffered yet: the turn will wait again
            if not published:
                published.append(in_other_thread(lambda: durable.publish_event("cfx.late", {"k": 1}, id="late-1")))
            return got

        monkeypatch.setattr(store, "take_event", take_then_publish)
        assert engine.run_turn(run_id) == "suspended"
        monkeypatch.undo()
        assert published[0].delivered == [run_id]
        assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "completed"
        row = Run.objects.get(id=run_id)
        assert row.wake_at <= clock.now(), f"run sleeps until {row.wake_at} (now {clock.now()})"
        run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", {"k": 1})


def _finish_child_when_parent_reads_it(monkeypatch: pytest.MonkeyPatch, child_id: str) -> list[Any]:
    """Right after the parent's turn read the child (not settled yet), the child completes elsewhere."""
    original = store.resolve_run
    finished: list[Any] = []

    def resolve_then_finish(rid: str) -> Any:
        rec = original(rid)
        if rid == child_id and not finished:
            assert rec is not None and rec.status not in ("completed", "failed", "cancelled")
            engine = get_engine()
            finished.append(in_other_thread(lambda: engine.run_turn(child_id)))
        return rec

    monkeypatch.setattr(store, "resolve_run", resolve_then_finish)
    return finished


@pytest.mark.parametrize("when", ["first_registration", "reconcile_turn"])
def test_child_finishing_while_its_parent_registers_the_wait_wakes_the_parent(monkeypatch, when):
    with override_settings(DURABLE=NO_RECONCILE), fake_clock() as clock:
        engine = get_engine()
        if when == "first_registration":
            # The child exists (start_child flushed it) when the parent goes on to wait for it.
            parent, child_id = durable.start(cfx_starter, 5, run_id="join-race"), "join-race.child.1"
        else:
            # The parent already waits; its reconcile turn races the child's completion.
            parent, child_id = durable.start(cfx_waits_on_sleepy, 5, run_id="rec-race"), "rec-race.child.1"
            assert engine.run_turn(parent) == "suspended"
            assert engine.run_turn(child_id) == "suspended"  # sleeping 1m
            clock.advance(engine.settings.reconcile_after + 1)
        finished = _finish_child_when_parent_reads_it(monkeypatch, child_id)
        assert engine.run_turn(parent) == "suspended"
        monkeypatch.undo()
        assert finished == ["completed"]
        row = Run.objects.get(id=parent)
        assert row.wake_at <= clock.now(), f"parent sleeps until {row.wake_at} (now {clock.now()})"
        run = run_until_settled(parent)
    expected = {"id": child_id, "joined": 50} if when == "first_registration" else 50
    assert (run.status, run.output) == ("completed", expected)
    assert executed[f"leaf:{child_id}"] == 1
    assert Run.objects.filter(parent_id=parent).count() == 1
    assert_one_checkpoint_per_seq()


def test_child_racing_its_parent_freely_never_loses_the_wake():
    iterations = 8
    with override_settings(DURABLE=NO_RECONCILE):
        engine = get_engine()
        for i in range(iterations):
            parent = durable.start(cfx_starter, i, run_id=f"free-{i}")
            child_id = f"free-{i}.child.1"

            def racer(k: int, parent: str = parent, child_id: str = child_id) -> Any:
                if k == 0:
                    return engine.run_turn(parent)
                deadline = time.monotonic() + SETTLE
                while time.monotonic() < deadline:  # take the child's turn as soon as it exists
                    status = engine.run_turn(child_id) if Run.objects.filter(id=child_id).exists() else None
                    if status is not None:
                        return status
                    time.sleep(0.0005)
                raise AssertionError("child never became runnable")

            concurrently(2, racer)
            run = run_until_settled(parent, timeout=SETTLE)
            assert (run.status, run.output) == ("completed", {"id": child_id, "joined": i * 10}), f"iteration {i}"
            assert executed[f"leaf:{child_id}"] == 1
    assert_one_checkpoint_per_seq()


# -- 6. fan-out ------------------------------------------------------------------------------------


def _count_dispatches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    sent: list[tuple[str, int]] = []
    monkeypatch.setattr(
        ManualTransport,
        "dispatch_step",
        lambda self, rid, seq, queue, delay=0.0, namespace=None: sent.append((rid, seq)),
    )
    return sent


def test_gather_of_n_steps_costs_one_turn_and_one_commit_to_dispatch(monkeypatch, turns):
    xs = [1, 2, 3, 4, 5]
    sent = _count_dispatches(monkeypatch)
    commits: list[str] = []
    original = store.commit

    def counting_commit(run_id, *args: Any, **kwargs: Any) -> bool:
        commits.append(run_id)
        return original(run_id, *args, **kwargs)

    monkeypatch.setattr(store, "commit", counting_commit)
    run_id = durable.start(cfx_fanout, xs, run_id="fan")
    assert get_engine().run_turn(run_id) == "suspended"
    assert turns == [(run_id, "suspended")]
    assert commits == [run_id]
    assert sorted(sent) == [(run_id, seq) for seq in range(1, 6)]
    assert [c[3] for c in checkpoints(run_id)] == ["pending"] * 5

    run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", [1, 4, 9, 16, 25])
    assert all(executed[f"square:{x}"] == 1 for x in xs)
    assert_one_checkpoint_per_seq()


def _commit_dispatches(run_id, owner, now, lease_until, writes, outcome=None) -> bool:
    return run_id == "fan-crash" and any(w.record.kind == "step" and w.create for w in writes.checkpoints)


def _commit_resumes(run_id, owner, now, lease_until, writes, outcome=None) -> bool:
    return run_id == "fan-crash" and outcome is not None and not any(w.create for w in writes.checkpoints)


@pytest.mark.parametrize("crash", ["died_before_dispatch_commit", "died_after_dispatch_commit", "died_mid_results"])
def test_crash_between_fan_out_dispatch_and_results_runs_each_step_once(monkeypatch, turns, crash):
    xs = [1, 2, 3, 4]
    engine = get_engine()
    sent = _count_dispatches(monkeypatch)
    with fake_clock() as clock:
        run_id = durable.start(cfx_fanout, xs, run_id="fan-crash")
        if crash == "died_mid_results":
            assert engine.run_turn(run_id) == "suspended"
            assert len(sent) == 4
            # Step 2's worker claims it and dies before running it...
            now = runtime.now()
            lease = timedelta(seconds=engine.settings.step_execution_lease)
            assert store.claim_step(run_id, 2, "dead-worker", now, now + lease) is not None
            # ...the three others land, and none resumes the run (it waits on step 2 too)...
            assert [engine.execute_step(run_id, seq) for seq in (1, 3, 4)] == ["completed"] * 3
            assert store.get_run(run_id).status == "suspended"
            # ...then step 2 is retried, and the turn its result resumes dies before committing.
            clock.advance(engine.settings.step_execution_lease + 1)
            fail_once(monkeypatch, "commit", _commit_resumes, exc=Crash("killed in the resume turn"))
            with pytest.raises(Crash):
                run_until_settled(run_id)
            assert_orphaned(run_id)
        else:
            after = crash == "died_after_dispatch_commit"
            fail_once(monkeypatch, "commit", _commit_dispatches, exc=Crash("killed"), after=after)
            with pytest.raises(Crash):
                engine.run_turn(run_id)
            # Dispatch is announced only after commit: a dying turn announces nothing.
            assert sent == []
            if after:
                assert [c[3] for c in checkpoints(run_id)] == ["pending"] * 4
            else:
                assert checkpoints(run_id) == []
                assert_orphaned(run_id)
        monkeypatch.undo()
        run = recover(run_id, clock)

    assert (run.status, run.output) == ("completed", [1, 4, 9, 16]), run.error
    assert {x: executed[f"square:{x}"] for x in xs} == {x: 1 for x in xs}
    assert [c[1:] for c in checkpoints(run_id)] == [("step", "cfx_square", "completed")] * 4
    attempts = dict(Checkpoint.objects.filter(run_id=run_id).values_list("seq", "attempts"))
    # Step 2 was claimed by the dead worker (attempt 1) and ran on attempt 2.
    assert attempts == ({1: 1, 2: 2, 3: 1, 4: 1} if crash == "died_mid_results" else {1: 1, 2: 1, 3: 1, 4: 1})
    # Only the turn that committed the dispatch wrote the pending steps: one dispatching turn, and
    # the fan-out is resumed once, by its last result (the turn a crash killed is not recorded).
    dispatching = ["suspended"] if crash != "died_after_dispatch_commit" else []
    assert [s for rid, s in turns if rid == run_id] == [*dispatching, "completed"]
    assert_one_checkpoint_per_seq()


# -- 7. exactly-once database work (ctx.transaction) ------------------------------------------


def _commit_records_transaction(run_id, owner, now, lease_until, writes, outcome=None) -> bool:
    return any(w.record.kind == "transaction" for w in writes.checkpoints)


@pytest.mark.parametrize(
    "crash",
    [
        "checkpoint_write_fails",
        "died_after_commit",
    ],
)
def test_crash_around_a_database_transaction_applies_its_write_once(monkeypatch, crash):
    """The business write and its checkpoint commit or roll back together."""
    engine = get_engine()
    with fake_clock() as clock:
        run_id = durable.start(cfx_tx, f"team-{crash}", run_id=f"tx-{crash}")
        if crash == "checkpoint_write_fails":
            fail_once(monkeypatch, "commit", _commit_records_transaction, exc=DB_DOWN)
            assert engine.run_turn(run_id) == "fault"
            assert not Group.objects.exists(), "the business write must roll back with its record"
            assert checkpoints(run_id) == []
        else:
            faults["tx:after"] = Crash("killed right after the transaction committed")
            with pytest.raises(Crash):
                engine.run_turn(run_id)
            assert_orphaned(run_id)
            assert checkpoints(run_id) == [(1, "transaction", "create_group", "completed")]
        monkeypatch.undo()
        run = recover(run_id, clock)

    assert (run.status, run.output) == ("completed", f"team-{crash}"), run.error
    assert Group.objects.filter(name=f"team-{crash}").count() == 1
    # Ran again only when its first run rolled back.
    assert executed["tx_body"] == (2 if crash == "checkpoint_write_fails" else 1)
    assert_one_checkpoint_per_seq()
