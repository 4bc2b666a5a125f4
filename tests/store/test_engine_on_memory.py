"""The engine on the memory store: workflows run to completion with no database at all.

Nothing here is marked ``django_db``: the store is a MemoryStore, the
transport is the manual one (nothing runs behind the test's back), and time
is a fake clock that moves only when the test says so.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import durable
from durable import conf
from durable.engine.clock import FakeClock
from durable.engine.core import AnyFleet, Engine
from durable.engine.leases import LeaseKeeper
from durable.engine.new_runs import run_fields
from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from durable.runtime import registry
from durable.store.memory import MemoryStore
from durable.transports.manual import ManualTransport

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
calls: Counter[str] = Counter()
attempts: Counter[str] = Counter()


# The engine's settings as DURABLE would give them (parsed, so a new setting takes its default here too).
SETTINGS = conf.parse(
    {
        "TRANSPORT": "manual",
        "LEASE": 30.0,
        "RECONCILE_AFTER": 300.0,
        "MAX_RECOVERY_ATTEMPTS": 5,
        "WORKER_INTERVAL": 1.0,
        "WORKER_THREADS": 1,
        "EMBEDDED_WORKER": False,
        "DEFAULT_NAMESPACE": "default",
        "STEP_EXECUTION_LEASE": 60.0,
        "STEP_LEASE": None,
        "STEP_REDISPATCH_MAX": 3,
        "HEARTBEAT_INTERVAL": 5.0,
        "MAX_PAYLOAD_BYTES": 1024 * 1024,
        "SWEEP_BATCH": 100,
        "FLEET_CHECK": False,
        "EAGER_STEPS": False,
        "FLEET_TTL": 30.0,
        "PREPARED_STATEMENTS": False,
        "RETENTION": {"completed": 30 * 86400.0, "cancelled": 30 * 86400.0, "failed": 90 * 86400.0, "dead": None},
        "RETENTION_ARCHIVE": None,
        "RETENTION_BATCH": 500,
        "RETENTION_INTERVAL": 600.0,
        "QUEUES": {},
    }
)


@durable.step
def m_tax(amount: int) -> int:
    calls["m_tax"] += 1
    return amount + amount // 10


@durable.step(retries=2, backoff="fixed")
def m_flaky(value: str) -> str:
    attempts["m_flaky"] += 1
    if attempts["m_flaky"] < 2:
        raise ConnectionError("down")
    return value.upper()


@durable.workflow(name="m_order")
def m_order(ctx: durable.WorkflowContext, data: dict[str, int]) -> dict[str, Any]:
    price = ctx.local_step("price", lambda: calls.update(["price"]) or data["qty"] * 30)
    ctx.sleep("1h")
    approval = ctx.wait_signal("approve")
    taxed = ctx.step(m_tax, price)
    return {"price": price, "approval": approval, "taxed": taxed}


@durable.workflow(name="m_mutates_before_commit")
def m_mutates_before_commit(ctx: durable.WorkflowContext) -> list[Any]:
    local = ctx.local_step("local", lambda: {"n": [1]})
    local["n"].append(2)  # user code changes what it got, before the turn commits it
    effect = ctx.side_effect(lambda: {"n": [1]}, name="effect")
    effect["n"].append(2)  # after its commit (the memory store keeps what was committed)
    ctx.wait_signal("go")
    return [local, effect]


@durable.step
def m_listed() -> dict[str, list[int]]:
    return {"n": [1]}


@durable.workflow(name="m_eager_mutates")
def m_eager_mutates(ctx: durable.WorkflowContext) -> Any:
    value = ctx.step(m_listed)
    value["n"].append(2)  # run eagerly in the turn: its record is not committed yet
    ctx.wait_signal("go")
    return value


@durable.workflow(name="m_two_signals")
def m_two_signals(ctx: durable.WorkflowContext) -> list[Any]:
    return [ctx.wait_signal("item"), ctx.wait_signal("item")]


@durable.workflow(name="m_retry")
def m_retry(ctx: durable.WorkflowContext) -> str:
    return str(ctx.step(m_flaky, "ok"))


@durable.workflow(name="m_kid")
def m_kid(ctx: durable.WorkflowContext, n: int) -> int:
    return n * 2


@durable.workflow(name="m_parent")
def m_parent(ctx: durable.WorkflowContext) -> int:
    return int(ctx.child(m_kid, 21)) + 1


@pytest.fixture
def fake() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(fake: FakeClock) -> MemoryStore:
    return MemoryStore(clock=fake)


@pytest.fixture
def engine(store: MemoryStore, fake: FakeClock) -> Engine:
    """An engine of its own: nothing process-wide (no installed clock, no runtime)."""
    calls.clear()
    attempts.clear()
    return _engine(store, fake)


def _engine(store: MemoryStore, fake: FakeClock, settings: Any = SETTINGS, **extra: Any) -> Engine:
    return Engine(
        store,
        ManualTransport(),
        settings,
        registry=registry,
        clock=fake,
        owner="memory-test",
        keeper=LeaseKeeper(),
        fleet=AnyFleet(),
        **extra,
    )


def start(store: MemoryStore, fake: FakeClock, workflow: str, run_id: str, value: Any = None) -> None:
    wf = registry.get_workflow(workflow)
    assert store.create_run(run_fields(wf, run_id, value, now=fake.now(), namespace="default"))


def kinds(store: MemoryStore, run_id: str) -> list[tuple[int, str, str]]:
    return [(seq, cp.kind, cp.status) for seq, cp in store.load_checkpoints(run_id).items()]


def test_a_workflow_with_a_local_step_a_sleep_a_signal_and_a_step_completes(
    engine: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    start(store, fake, "m_order", "o1", {"qty": 2})
    assert engine.run_turn("o1") == RunStatus.SUSPENDED
    assert kinds(store, "o1") == [(1, CheckpointKind.LOCAL, "completed"), (2, CheckpointKind.SLEEP, "pending")]
    assert store.get_run("o1").wake_at == START + timedelta(hours=1)
    assert engine.run_turn("o1") is None  # not due yet
    fake.advance("1h")
    assert engine.run_turn("o1") == RunStatus.SUSPENDED
    assert kinds(store, "o1")[1:] == [(2, "sleep", "completed"), (3, "signal", "pending")]
    assert store.signal("o1", "approve", {"by": "ann"}, fake.now()) is True
    assert engine.run_turn("o1") == RunStatus.SUSPENDED
    assert kinds(store, "o1")[2:] == [(3, "signal", "completed"), (4, "step", "pending")]
    assert store.due_steps(fake.now(), 10) == [("o1", 4, None)]
    assert engine.execute_step("o1", 4) == "completed"
    run = store.get_run("o1")
    assert (run.status, run.output) == ("completed", {"price": 60, "approval": {"by": "ann"}, "taxed": 66})
    assert (calls["price"], calls["m_tax"]) == (1, 1)
    assert engine.execute_step("o1", 4) == "skipped"  # a re-delivery finds it settled
    assert calls["m_tax"] == 1
    assert (run.locked_by, run.wake_at, store.tables.waiters) == (None, None, {})


def test_signals_sent_before_the_waits_are_consumed_in_order(
    engine: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    start(store, fake, "m_two_signals", "s1")
    engine.run_turn("s1")
    assert store.signal("s1", "item", "first", fake.now()) is True
    assert store.signal("s1", "item", "second", fake.now()) is True  # still suspended: woken again
    assert engine.run_turn("s1") == RunStatus.COMPLETED
    assert store.get_run("s1").output == ["first", "second"]
    assert store.next_signal("s1", "item", []) is None


def test_a_dispatched_step_retry_waits_for_its_backoff_on_the_fake_clock(
    engine: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    start(store, fake, "m_retry", "r1")
    assert engine.run_turn("r1") == RunStatus.SUSPENDED
    assert engine.execute_step("r1", 1) == "retrying"
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.attempts, cp.error["type"]) == (CheckpointStatus.PENDING, 1, "ConnectionError")
    assert engine.execute_step("r1", 1) == "skipped"  # the retry is not due yet
    assert cp.retry_at is not None
    fake.advance(cp.retry_at - fake.now())
    assert engine.execute_step("r1", 1) == "completed"
    run = store.get_run("r1")
    assert (run.status, run.output, attempts["m_flaky"]) == ("completed", "OK", 2)
    assert store.load_checkpoints("r1")[1].attempts == 2


def test_a_child_completing_wakes_its_waiting_parent(engine: Engine, store: MemoryStore, fake: FakeClock) -> None:
    start(store, fake, "m_parent", "p1")
    assert engine.run_turn("p1") == RunStatus.SUSPENDED
    (child_id,) = [run_id for run_id, row in store.tables.runs.items() if row["parent_id"] == "p1"]
    assert store.get_run(child_id).status == RunStatus.PENDING
    assert engine.run_turn(child_id) == RunStatus.COMPLETED
    assert store.get_run("p1").wake_at == fake.now()  # woken by the child's commit
    assert engine.run_turn("p1") == RunStatus.COMPLETED
    assert store.get_run("p1").output == 43


def test_a_turn_that_lost_its_run_to_a_cancel_writes_nothing(
    engine: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    start(store, fake, "m_order", "c1", {"qty": 1})
    engine.run_turn("c1")
    store.cancel("c1", fake.now())
    fake.advance("1h")
    assert engine.run_turn("c1") is None
    assert kinds(store, "c1") == [(1, "local", "completed"), (2, "sleep", "pending")]
    assert store.get_run("c1").status == RunStatus.CANCELLED


def test_a_claimed_page_of_turns_commits_together(engine: Engine, store: MemoryStore, fake: FakeClock) -> None:
    for i in range(3):
        start(store, fake, "m_order", f"p{i}", {"qty": i + 1})
    store.cancel("p1", fake.now())
    page = store.claim_due_runs(engine.owner, fake.now(), fake.now() + timedelta(seconds=30), 10)
    assert [run.id for run in page] == ["p0", "p2"]
    results = engine.run_turns([(run, store.load_histories([run.id]).get(run.id, {})) for run in page])
    assert results == [RunStatus.SUSPENDED, RunStatus.SUSPENDED]
    assert [store.get_run(f"p{i}").status for i in range(3)] == ["suspended", "cancelled", "suspended"]
    assert store.load_checkpoints("p2")[1].output == 90
    assert store.next_wake() == START + timedelta(hours=1)


def test_the_sweeps_drive_a_workflow_to_completion_on_the_memory_store(
    engine: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    from durable.worker import tick

    # The sweeps read time through the engine: nothing process-wide to install.
    start(store, fake, "m_order", "w1", {"qty": 3})
    assert tick(engine)["turns"] == 1
    assert tick(engine)["turns"] == 0  # asleep for an hour
    fake.advance("1h")
    assert tick(engine)["turns"] == 1
    store.signal("w1", "approve", "yes", fake.now())
    assert tick(engine)["turns"] == 1  # the turn dispatches the step (the manual transport delivers nothing)
    assert tick(engine)["steps"] == 1  # the step sweep runs it; its result takes the run's last turn at once
    run = store.get_run("w1")
    assert (run.status, run.output) == ("completed", {"price": 90, "approval": "yes", "taxed": 99})
    assert not any(tick(engine).values())


def test_a_value_the_workflow_changes_before_its_commit_is_recorded_as_the_step_returned_it(
    engine: Engine, store: MemoryStore, fake: FakeClock
) -> None:
    start(store, fake, "m_mutates_before_commit", "mu1")
    assert engine.run_turn("mu1") == RunStatus.SUSPENDED
    assert [cp.output for cp in store.load_checkpoints("mu1").values()][:2] == [{"n": [1]}, {"n": [1]}]
    assert store.signal("mu1", "go", None, fake.now()) is True
    assert engine.run_turn("mu1") == RunStatus.COMPLETED
    assert store.get_run("mu1").output == [{"n": [1, 2]}, {"n": [1, 2]}]  # the replay changed them once


def test_an_eager_steps_result_the_workflow_changes_is_recorded_as_the_step_returned_it(
    store: MemoryStore, fake: FakeClock
) -> None:
    # This process consumes the default queue, so the step runs in the turn.
    eager = _engine(store, fake, dataclasses.replace(SETTINGS, eager_steps=True), eager_routes=frozenset({None}))
    start(store, fake, "m_eager_mutates", "me1")
    assert eager.run_turn("me1") == RunStatus.SUSPENDED
    assert store.load_checkpoints("me1")[1].output == {"n": [1]}
    assert store.signal("me1", "go", None, fake.now()) is True
    assert eager.run_turn("me1") == RunStatus.COMPLETED
    assert store.get_run("me1").output == {"n": [1, 2]}
