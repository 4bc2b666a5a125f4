"""The store contract suite: one set of tests, run against every store.

``store`` is parametrized over the implementations of
:class:`durable.engine.ports.Store`: ``memory`` (no database), ``portable``
(the ORM store, on whatever database the suite runs on) and ``postgres``
(PostgreSQL only; marked ``postgres``, so ``-m "not postgres"`` deselects
it on SQLite and CI fails it when PostgreSQL is missing).

``probe`` reads what the protocol has no reader for (waiter rows, buffered
signals, dispatch counters), from the tables or from the memory store's state.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durable.engine.ports import CheckpointRecord, CheckpointWrite, Outcome, RunRecord, TurnWrites, Waiter
from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from durable.store import factory
from durable.store.portable import PortableStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
OWNER = "owner-a"
OTHER = "owner-b"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


LEASE = at(30)

STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("portable", id="portable", marks=pytest.mark.django_db),
    pytest.param("postgres", id="postgres", marks=[pytest.mark.django_db, pytest.mark.postgres]),
]


def _database_store(kind: str) -> Any:
    """The ORM store (``portable``, on any database) or the store the factory picks (``postgres``)."""
    if kind == "portable":
        return PortableStore()
    from django.db import connection

    return factory.for_connection(connection)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Any:
    kind = request.param
    if kind == "memory":
        from durable.store.memory import MemoryStore

        return MemoryStore()
    if kind == "postgres":
        from django.db import connection

        if connection.vendor != "postgresql":
            pytest.fail("the postgres store needs PostgreSQL: set DATABASE_URL=postgres://...")
    return _database_store(kind)


class DatabaseProbe:
    """Reads the tables directly."""

    def waiters(self, run_id: str) -> list[tuple[str, int, Any]]:
        from durable.models import SignalWaiter

        rows = SignalWaiter.objects.filter(run_id=run_id).order_by("seq")
        return [(w.name, w.seq, w.match) for w in rows]

    def signals(self, run_id: str) -> list[tuple[str, Any]]:
        from durable.models import BufferedSignal

        return [(s.name, s.payload) for s in BufferedSignal.objects.filter(run_id=run_id).order_by("id")]

    def awaited(self, run_id: str) -> bool:
        from durable.models import Run

        return bool(Run.objects.get(id=run_id).awaited)

    def step(self, run_id: str, seq: int) -> dict[str, Any]:
        from durable.models import Checkpoint

        return dict(
            Checkpoint.objects.filter(run_id=run_id, seq=seq)
            .values("dispatches", "heartbeat_at", "progress", "locked_by")
            .get()
        )

    def events(self) -> list[tuple[str, str, Any, bool]]:
        from durable.models import BufferedEvent

        return [(e.event_id, e.name, e.payload, e.consumed) for e in BufferedEvent.objects.order_by("id")]

    def batches(self) -> list[tuple[str, list[Any], list[str], datetime]]:
        from durable.models import LifecycleBatch

        return [(b.subscriber, b.events, b.source_ids, b.fire_at) for b in LifecycleBatch.objects.order_by("id")]


class MemoryProbe:
    """Reads the memory store's tables."""

    def __init__(self, store: Any) -> None:
        self.tables = store.tables

    def waiters(self, run_id: str) -> list[tuple[str, int, Any]]:
        rows = [w for w in self.tables.waiters.values() if w["run_id"] == run_id]
        return sorted(((w["name"], w["seq"], w["match"]) for w in rows), key=lambda w: w[1])

    def signals(self, run_id: str) -> list[tuple[str, Any]]:
        return [(s["name"], s["payload"]) for s in self.tables.signals.values() if s["run_id"] == run_id]

    def awaited(self, run_id: str) -> bool:
        return bool(self.tables.runs[run_id]["awaited"])

    def step(self, run_id: str, seq: int) -> dict[str, Any]:
        row = self.tables.checkpoints[run_id][seq]
        return {key: row[key] for key in ("dispatches", "heartbeat_at", "progress", "locked_by")}

    def events(self) -> list[tuple[str, str, Any, bool]]:
        return [(e["event_id"], e["name"], e["payload"], e["consumed"]) for e in self.tables.events.values()]

    def batches(self) -> list[tuple[str, list[Any], list[str], datetime]]:
        return [(b["subscriber"], b["events"], b["source_ids"], b["fire_at"]) for b in self.tables.batches.values()]


@pytest.fixture
def probe(store: Any) -> Any:
    return MemoryProbe(store) if hasattr(store, "tables") else DatabaseProbe()


# -- building state through the store's own API -----------------------------------------


def fields(run_id: str, **extra: Any) -> dict[str, Any]:
    """The columns of a new pending run, as durable.engine.new_runs.run_fields builds them."""
    return {
        "id": run_id,
        "workflow": "wf",
        "version": 1,
        "status": RunStatus.PENDING,
        "namespace": "default",
        "input": {"x": 1},
        "tags": [],
        "search_attributes": {},
        "priority": 0,
        "created_at": T0,
        "updated_at": T0,
        "deadline_at": None,
        **extra,
    }


def running(store: Any, run_id: str, owner: str = OWNER, now: datetime = T0, **extra: Any) -> RunRecord:
    """A new run whose lease ``owner`` holds (its first turn)."""
    assert store.create_run(fields(run_id, **extra))
    run = store.acquire(run_id, owner, now, now + timedelta(seconds=30))
    assert run is not None
    return run


def step(seq: int, status: str = CheckpointStatus.PENDING, **extra: Any) -> CheckpointRecord:
    values: dict[str, Any] = {"name": "work", "input": {"args": [seq], "kwargs": {}}, "enqueued_at": T0}
    values.update(extra)
    return CheckpointRecord(seq=seq, kind=CheckpointKind.STEP, status=status, **values)


def record(seq: int, kind: str, status: str = CheckpointStatus.COMPLETED, **extra: Any) -> CheckpointRecord:
    values: dict[str, Any] = {"name": f"op{seq}", **extra}
    return CheckpointRecord(seq=seq, kind=kind, status=status, **values)


def creates(*records: CheckpointRecord) -> TurnWrites:
    return TurnWrites(checkpoints=[CheckpointWrite(rec, create=True) for rec in records])


def written(result: Any) -> bool:
    """A commit's verdict (a bool, or a CommitResult's ``written``)."""
    return result if isinstance(result, bool) else bool(result.written)


def woken(result: Any, outcome: Outcome) -> list[str]:
    """Runs a commit woke (CommitResult.woken, or what the store filled into the outcome)."""
    return sorted(outcome.woken if isinstance(result, bool) else result.woken)


def wake_of(result: Any, outcome: Outcome) -> datetime | None:
    """The run's wake as the commit wrote it."""
    return outcome.wake_at if isinstance(result, bool) else result.wake_at


def suspend(
    store: Any,
    run_id: str,
    *records: CheckpointRecord,
    wake_at: datetime | None = None,
    waiters: list[Waiter] | None = None,
    step_seqs: list[int] | None = None,
    owner: str = OWNER,
    now: datetime = T0,
) -> tuple[Any, Outcome]:
    """Commit a suspension (with new checkpoints and waiters) and return (result, outcome)."""
    outcome = Outcome(
        RunStatus.SUSPENDED,
        wake_at=wake_at or at(300),
        waiters=list(waiters or []),
        had_waiters=False,
        step_seqs=list(step_seqs or []),
    )
    result = store.commit(run_id, owner, now, now + timedelta(seconds=30), creates(*records), outcome)
    return result, outcome


def suspended(
    store: Any, run_id: str, *records: CheckpointRecord, namespace: str = "default", **kwargs: Any
) -> RunRecord:
    """A run suspended with ``records`` (first turn committed)."""
    running(store, run_id, namespace=namespace)
    result, _ = suspend(store, run_id, *records, **kwargs)
    assert written(result)
    run = store.get_run(run_id)
    assert run is not None
    return run


def finish(
    store: Any, run_id: str, status: str = RunStatus.COMPLETED, now: datetime = at(1), **kwargs: Any
) -> tuple[Any, Outcome]:
    """Commit a terminal outcome for a run ``OWNER`` holds."""
    outcome = Outcome(status, had_waiters=False, notify=[f"__run__:{run_id}"], **kwargs)
    return store.commit(run_id, OWNER, now, now + timedelta(seconds=30), TurnWrites(), outcome), outcome
