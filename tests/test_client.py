"""A Client on an engine of its own: its store, transport, registry and clock, nothing process-wide."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durable import conf, runtime
from durable.client import Client
from durable.engine.clock import FakeClock
from durable.engine.core import AnyFleet, Engine
from durable.engine.leases import LeaseKeeper
from durable.engine.ports import Transport
from durable.engine.registry import Registry, WorkflowDef
from durable.engine.vocab import RunStatus
from durable.exceptions import InvalidInput, WorkflowNotFound
from durable.store.memory import MemoryStore

START = datetime(2030, 1, 1, tzinfo=UTC)


class Recorder(Transport):
    """Records what would have been announced; runs nothing."""

    def __init__(self) -> None:
        self.turns: list[str] = []

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        self.turns.append(run_id)

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> None:
        return None


def greet(ctx: Any, name: str) -> str:
    return f"{ctx.wait_signal('go')} {name}"


@pytest.fixture
def own() -> tuple[Client, Engine, Recorder, FakeClock]:
    registry = Registry()
    registry.add_workflow(WorkflowDef(name="own.greet", version=1, fn=greet))
    clock = FakeClock(START)
    transport = Recorder()
    engine = Engine(
        MemoryStore(clock=clock),
        transport,
        conf.parse({"TRANSPORT": "manual", "DEFAULT_NAMESPACE": "own"}),
        registry=registry,
        clock=clock,
        owner="own-client",
        keeper=LeaseKeeper(),
        fleet=AnyFleet(),
    )
    return Client(engine), engine, transport, clock


@pytest.mark.django_db(transaction=True)
def test_a_client_of_its_own_reaches_only_its_own_engine(own: tuple[Client, Engine, Recorder, FakeClock]) -> None:
    client, engine, transport, clock = own
    default_engine = runtime._engine  # whatever the process built before: left as it was
    run_id = client.start("own.greet", "world", run_id="r1", tags=["t"])
    assert transport.turns == ["r1"]
    run = client.get_run(run_id)
    assert (run.status, run.namespace, run.tags, run.created_at) == (RunStatus.PENDING, "own", ["t"], START)
    assert engine.run_turn(run_id) == RunStatus.SUSPENDED
    clock.advance("1h")  # the engine's own clock: nothing installed process-wide
    announced = len(transport.turns)
    client.signal(run_id, "go", "hello")
    assert transport.turns[announced:] == ["r1"]  # the woken run's turn, through this engine's transport
    assert engine.run_turn(run_id) == RunStatus.COMPLETED
    run = client.get_run(run_id)
    assert (run.output, run.finished_at) == ("hello world", START + timedelta(hours=1))
    assert [r.id for r in client.list_runs(namespace="own").items] == ["r1"]
    assert client.cancel(run_id) is False  # it had ended
    # Nothing reached the process-wide graph: its registry never saw the workflow, its engine is unchanged.
    with pytest.raises(WorkflowNotFound):
        runtime.registry.get_workflow("own.greet")
    assert runtime._engine is default_engine


def test_a_client_refuses_bad_input_before_writing(own: tuple[Client, Engine, Recorder, FakeClock]) -> None:
    client, engine, transport, _ = own
    with pytest.raises(InvalidInput):
        client.start("own.greet", "world", run_id="has space")
    with pytest.raises(WorkflowNotFound):
        client.start("not.registered")
    assert (
        engine.store.list_runs(
            statuses=[],
            workflow=None,
            namespace=None,
            tag=None,
            attributes=[],
            created_after=None,
            created_before=None,
            after=None,
            limit=10,
        )
        == []
    )
    assert transport.turns == []


class BrokerDown(Recorder):
    """A transport whose broker refuses every message (as Redis does while it restarts)."""

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        raise ConnectionRefusedError("Error 111 connecting to the broker. Connection refused.")


@pytest.mark.django_db(transaction=True)
def test_a_broker_error_after_the_write_committed_does_not_fail_the_call(
    own: tuple[Client, Engine, Recorder, FakeClock],
) -> None:
    """The broker is a doorbell: once the tables hold the work, a failed announcement is not the caller's error.

    Raising would tell the caller that a signal was not sent when it was: a retry
    would send it twice. The run is due in the tables, so a sweep takes it.
    """
    client, engine, _, clock = own
    down = Engine(
        engine.store, BrokerDown(), engine.settings, registry=engine.registry, clock=clock, owner="own-client",
        keeper=LeaseKeeper(), fleet=AnyFleet(),
    )  # fmt: skip
    client = Client(down)
    run_id = client.start("own.greet", "world", run_id="r1")
    assert client.get_run(run_id).status == RunStatus.PENDING  # created, and due for any sweep
    assert down.run_turn(run_id) == RunStatus.SUSPENDED
    client.signal(run_id, "go", "hello")
    assert engine.store.due_runs(clock.now(), 10) == [run_id]  # woken in the tables: the sweep's to take
    assert down.run_turn(run_id) == RunStatus.COMPLETED
    assert client.get_run(run_id).output == "hello world"  # the signal was taken once
    client.start("own.greet", "again", run_id="r2")
    assert client.cancel("r2") is True
