"""Resident workflows: a run waiting on a dispatched step is resumed in memory, never replayed, unless in doubt.

On the memory store with a fake clock and the manual transport (each step run
as a worker runs its delivered message: the step, then the run's next turn
inline). ``entered`` counts how often the workflow function started from its
top (one replay each), ``unwound`` how often its frames unwound through its
``finally`` without finishing. Two engines with their own owner ids stand for
two processes.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test import override_settings

import durable
from durable import conf
from durable.engine import resident
from durable.engine.clock import FakeClock
from durable.engine.core import Engine
from durable.engine.ports import CommitResult
from durable.engine.vocab import RunStatus
from durable.exceptions import StepFailed
from durable.runtime import get_engine, registry
from durable.store.memory import MemoryStore
from tests.test_history_cache import _engine, _start, fake, one, reads, store, two

__all__ = ["fake", "one", "reads", "store", "two"]  # fixtures used here

pytestmark = pytest.mark.skipif(not resident.available(), reason="greenlet is not installed")

entered: list[str] = []
unwound: list[str] = []
undone: list[int] = []


@durable.step(name="rs_double")
def rs_double(i: int) -> int:
    return i * 2


@durable.step(name="rs_boom")
def rs_boom() -> None:
    raise ValueError("no")


@durable.workflow(name="rs_steps")
def rs_steps(ctx: durable.WorkflowContext, n: int) -> list[int]:
    entered.append(ctx.run_id)
    try:
        return [ctx.step(rs_double, i) for i in range(n)]
    finally:
        unwound.append(ctx.run_id)


@durable.workflow(name="rs_saga")
def rs_saga(ctx: durable.WorkflowContext) -> None:
    entered.append(ctx.run_id)
    for i in range(3):
        ctx.step(rs_double, i, compensate=lambda args, out: undone.append(out))
    ctx.step(rs_boom)


@durable.workflow(name="rs_gather")
def rs_gather(ctx: durable.WorkflowContext) -> int:
    entered.append(ctx.run_id)
    first = ctx.gather(durable.call(rs_double, 1), durable.call(rs_double, 2))
    return sum(first) + ctx.step(rs_double, 10)


@pytest.fixture(autouse=True)
def _clear() -> None:
    entered.clear()
    unwound.clear()
    undone.clear()


def _drive(engine: Engine, run_id: str, seqs: range) -> None:
    for seq in seqs:
        engine.execute_step(run_id, seq)


def test_a_run_of_dispatched_steps_runs_its_workflow_code_once(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str]
) -> None:
    assert one.resident
    _start(store, fake, "rs_steps", "r1", input=5)
    assert one.run_turn("r1") == RunStatus.SUSPENDED
    _drive(one, "r1", range(1, 6))
    assert store.get_run("r1").output == [0, 2, 4, 6, 8]
    assert entered == ["r1"]  # six turns, one start from the top
    assert unwound == ["r1"]  # its finally ran once: when it returned
    assert (reads["full"], reads["delta"]) == (0, 5)  # each resumed turn read what changed
    assert len(one.histories) == 0


def test_without_residency_every_turn_replays(store: MemoryStore, fake: FakeClock) -> None:
    replaying = _engine(store, fake, "replayer")
    replaying.resident = False  # as RESIDENT_WORKFLOWS: False makes it
    _start(store, fake, "rs_steps", "r1", input=3)
    replaying.run_turn("r1")
    _drive(replaying, "r1", range(1, 4))
    assert store.get_run("r1").output == [0, 2, 4]
    assert entered == ["r1"] * 4
    assert unwound == ["r1"] * 4  # a replay's suspension unwinds through finally every time


def test_an_engine_without_greenlet_replays(
    store: MemoryStore, fake: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resident, "_greenlet", None)
    engine = _engine(store, fake, "plain")
    assert not engine.resident
    _start(store, fake, "rs_steps", "r1", input=2)
    engine.run_turn("r1")
    _drive(engine, "r1", range(1, 3))
    assert (store.get_run("r1").output, len(entered)) == ([0, 2], 3)


def test_a_turn_of_another_process_in_between_ends_the_parked_workflow_and_replays(
    one: Engine, two: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    _start(store, fake, "rs_steps", "r1", input=3)
    one.run_turn("r1")  # parks here, waiting on step 1
    two.execute_step("r1", 1)  # the other process runs step 1 and the next turn (a replay there)
    assert entered == ["r1", "r1"]
    one.execute_step("r1", 2)  # this process's entry is stale: its parked workflow is ended, the turn replays
    assert unwound == ["r1"]  # ended at its waiting step: unwound as a replay's suspension is
    assert entered == ["r1"] * 3
    one.execute_step("r1", 3)  # resumed: parked by the turn before, here
    assert store.get_run("r1").output == [0, 2, 4]
    assert entered == ["r1"] * 3
    assert unwound == ["r1"] * 2


def test_a_parked_workflow_is_resumed_only_in_the_thread_that_parked_it(
    one: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    _start(store, fake, "rs_steps", "r1", input=3)
    one.run_turn("r1")
    worker = threading.Thread(target=one.execute_step, args=("r1", 1))
    worker.start()
    worker.join()
    assert entered == ["r1", "r1"]  # another thread: a replay (the parked greenlet cannot move)
    one.execute_step("r1", 2)  # parked by that thread's turn: this thread replays again
    assert entered == ["r1"] * 3
    one.execute_step("r1", 3)
    assert store.get_run("r1").output == [0, 2, 4]
    assert entered == ["r1"] * 3


def test_a_cancel_ends_the_parked_workflow_and_the_turn_replays_its_saga(
    one: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    _start(store, fake, "rs_saga", "r1")
    one.run_turn("r1")
    _drive(one, "r1", range(1, 3))  # two steps done, waiting on the third
    assert entered == ["r1"]
    assert store.cancel("r1", fake.now(), compensate=True).done
    assert one.run_turn("r1") == RunStatus.CANCELLED
    assert entered == ["r1", "r1"]  # the cancelled turn replayed (the entry does not serve a cancel)
    assert sorted(undone) == [0, 2]


def test_a_saga_kept_across_resumed_turns_undoes_each_step_once(
    one: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    _start(store, fake, "rs_saga", "r1")
    one.run_turn("r1")
    _drive(one, "r1", range(1, 5))
    run = store.get_run("r1")
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "step_failed"
    assert entered == ["r1"]
    assert sorted(undone) == [0, 2, 4]


def test_a_workflow_that_waits_on_more_than_one_step_replays(one: Engine, store: MemoryStore, fake: FakeClock) -> None:
    _start(store, fake, "rs_gather", "r1")
    one.run_turn("r1")
    assert one.histories.take("r1", fake.now()) is not None  # an entry, but with nothing parked...
    _start(store, fake, "rs_gather", "r2")
    one.run_turn("r2")
    entry = one.histories._entries["r2"]
    assert entry.parked is None  # ...since the gather waits on two steps
    _drive(one, "r2", range(1, 4))
    assert store.get_run("r2").output == 2 + 4 + 20
    assert entered.count("r2") == 2  # one replay, once the gather's last result woke it; step 3's turn resumed


def test_a_refused_commit_ends_the_parked_workflow(
    one: Engine, store: MemoryStore, fake: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(store, fake, "rs_steps", "r1", input=2)
    commit = store.commit

    def refused(*args: Any, **kwargs: Any) -> CommitResult:
        commit(*args, **kwargs)
        return CommitResult(written=False)

    monkeypatch.setattr(store, "commit", refused)
    one.run_turn("r1")
    assert unwound == ["r1"]  # parked, then ended: its commit was not written
    assert len(one.histories) == 0
    monkeypatch.setattr(store, "commit", commit)
    _drive(one, "r1", range(1, 3))
    assert store.get_run("r1").output == [0, 2]


def test_an_evicted_entry_ends_its_parked_workflow(store: MemoryStore, fake: FakeClock) -> None:
    engine = _engine(store, fake, "small", size=1)
    for run_id in ("a", "b"):
        _start(store, fake, "rs_steps", run_id, input=2)
        engine.run_turn(run_id)
    assert unwound == ["a"]  # b's entry pushed a's out
    for run_id in ("a", "b"):
        _drive(engine, run_id, range(1, 3))
    assert [store.get_run(r).output for r in ("a", "b")] == [[0, 2], [0, 2]]


def test_a_changed_workflow_function_is_replayed_not_resumed(
    one: Engine, store: MemoryStore, fake: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(store, fake, "rs_steps", "r1", input=2)
    one.run_turn("r1")
    wf = registry.get_workflow("rs_steps")

    def new_code(ctx: durable.WorkflowContext, n: int) -> list[int]:
        entered.append("new")
        return [ctx.step(rs_double, i) for i in range(n)]

    original = registry.get_workflow
    changed = dataclasses.replace(wf, fn=new_code)
    monkeypatch.setattr(registry, "get_workflow", lambda n, *a: changed if n == "rs_steps" else original(n, *a))
    _drive(one, "r1", range(1, 3))
    assert entered == ["r1", "new"]
    assert unwound == ["r1"]
    assert store.get_run("r1").output == [0, 2]


def test_a_failed_step_raises_in_the_resumed_workflow(one: Engine, store: MemoryStore, fake: FakeClock) -> None:
    caught: list[str] = []

    @durable.workflow(name="rs_catches")
    def rs_catches(ctx: durable.WorkflowContext) -> str:
        try:
            ctx.step(rs_boom)
        except StepFailed as exc:
            caught.append(exc.step)
        return "handled"

    _start(store, fake, "rs_catches", "r1")
    one.run_turn("r1")
    one.execute_step("r1", 1)
    assert (store.get_run("r1").output, caught) == ("handled", ["rs_boom"])


def test_the_setting_is_a_boolean_and_on_by_default() -> None:
    assert conf.parse({}).resident_workflows is True
    assert conf.parse({"RESIDENT_WORKFLOWS": False}).resident_workflows is False
    with pytest.raises(ImproperlyConfigured, match=r"RESIDENT_WORKFLOWS'\] must be True or False, got 'yes'"):
        conf.parse({"RESIDENT_WORKFLOWS": "yes"})


@durable.workflow(name="rs_waits")
def rs_waits(ctx: durable.WorkflowContext) -> list[Any]:
    entered.append(ctx.run_id)
    got: list[Any] = [ctx.wait_signal("go")]
    ctx.sleep("2m")
    got.append(ctx.wait_signal("go"))
    try:
        got.append(ctx.wait_signal("go", timeout="3m"))
    except durable.SignalTimeout:
        got.append("timed out")
    return got


def test_signal_and_timer_waits_park_too_and_a_deadline_reaches_the_resumed_workflow(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str]
) -> None:
    _start(store, fake, "rs_waits", "r1")
    assert one.run_turn("r1") == RunStatus.SUSPENDED
    assert store.signal("r1", "go", "a", fake.now())
    assert one.run_turn("r1") == RunStatus.SUSPENDED  # took "a", sleeps
    assert one.run_turn("r1") is None  # not due yet: no turn
    fake.advance("2m")  # (within HISTORY_CACHE_IDLE: the entry is still there)
    assert one.run_turn("r1") == RunStatus.SUSPENDED  # woke, waits on the second signal
    assert store.signal("r1", "go", "b", fake.now())
    assert one.run_turn("r1") == RunStatus.SUSPENDED  # took "b", waits with a deadline
    fake.advance("3m")
    assert one.run_turn("r1") == RunStatus.COMPLETED
    assert store.get_run("r1").output == ["a", "b", "timed out"]
    assert entered == ["r1"]  # five turns, every one after the first resumed
    assert (reads["full"], reads["delta"]) == (0, 4)


def test_an_idle_entry_ends_its_parked_workflow_and_the_turn_replays(
    one: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    _start(store, fake, "rs_steps", "r1", input=1)
    one.run_turn("r1")
    fake.advance("6m")  # past HISTORY_CACHE_IDLE (5 minutes here)
    one.execute_step("r1", 1)
    assert entered == ["r1", "r1"]
    assert unwound == ["r1", "r1"]  # the idle one ended at its step, then the replay returned
    assert store.get_run("r1").output == [0]


@durable.workflow(name="rs_atomic")
def rs_atomic(ctx: durable.WorkflowContext) -> list[int]:
    entered.append(ctx.run_id)
    with transaction.atomic():  # a misuse (workflow code does no I/O), which must not be made worse
        first = ctx.step(rs_double, 1)
    return [first, ctx.step(rs_double, 2)]


@pytest.mark.django_db(transaction=True)
def test_a_workflow_never_parks_inside_a_transaction_block_it_opened() -> None:
    with override_settings(DURABLE={"TRANSPORT": "manual", "EAGER_STEPS": False}):
        engine = get_engine()
        assert engine.resident
        run_id = durable.start("rs_atomic")
        assert engine.run_turn(run_id) == RunStatus.SUSPENDED
        assert not connection.in_atomic_block  # unwound out of its block, as a replay's suspension does
        engine.execute_step(run_id, 1)  # a replay: the step's turn parked outside the block
        assert entered == [run_id, run_id]
        engine.execute_step(run_id, 2)  # resumed
        assert entered == [run_id, run_id]
        assert durable.get_run(run_id).output == [2, 4]
        assert not connection.in_atomic_block
