"""Plans of the PostgreSQL store's prepared statements that cannot degrade with the data's skew.

A prepared statement is planned once per connection and, after five runs,
PostgreSQL may keep a generic plan: one made without the parameters' values,
from statistics that may predate the rows (autoanalyze comes late on a large
table). These tests build that situation (statistics taken while the tables
were empty, then 20,000 suspended runs, each waiting on its own token) and
read the generic plan of the statements themselves, as prepared.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from durable.engine.plan import plan_commit
from durable.engine.ports import CheckpointRecord, CheckpointWrite, Outcome, TurnWrites
from durable.engine.vocab import RUN_TOKEN, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import BufferedSignal, Checkpoint, Run, SignalWaiter
from durable.runtime import now
from durable.store.statements import (
    PG_ACQUIRE,
    PG_LEASE_HELD,
    PG_POKE_IF_SETTLED,
    PG_WAKE_WAITERS,
    PostgresStatements,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

SUSPENDED = 20_000
TABLES = ("durable_run", "durable_signalwaiter", "durable_bufferedsignal", "durable_checkpoint")


def _stale_statistics_then_rows() -> None:
    """Analyze the empty tables, then insert the suspended runs (their statistics say: no rows)."""
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ANALYZE {table}")
    at = now()
    Run.objects.bulk_create(
        [
            Run(id=f"s{i}", workflow="wf", status=RunStatus.SUSPENDED, wake_at=at + timedelta(hours=1))
            for i in range(SUSPENDED)
        ],
        batch_size=5000,
    )
    SignalWaiter.objects.bulk_create(
        [SignalWaiter(run_id=f"s{i}", name=f"{RUN_TOKEN}c{i}", seq=1) for i in range(SUSPENDED)], batch_size=5000
    )
    # Each suspended on a pending signal, the signal already buffered for a tenth of them.
    Checkpoint.objects.bulk_create(
        [Checkpoint(run_id=f"s{i}", seq=1, name="go", kind="signal", status="pending") for i in range(SUSPENDED)],
        batch_size=5000,
    )
    BufferedSignal.objects.bulk_create(
        [BufferedSignal(run_id=f"s{i}", name="go") for i in range(0, SUSPENDED, 10)], batch_size=5000
    )


def _generic_plan(sql: str, params: list[Any]) -> dict[str, Any]:
    """The generic plan of ``sql`` prepared as the store prepares it (``%s`` are its parameters)."""
    count = iter(range(1, len(params) + 1))
    text = re.sub("%s", lambda _: f"${next(count)}", sql)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
        cursor.execute(f"PREPARE planned AS {text}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        placeholders = ", ".join(["%s"] * len(params))
        cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE planned({placeholders})", params)
        plan = cursor.fetchone()[0]
        cursor.execute("DEALLOCATE planned")
    found = plan if isinstance(plan, list) else json.loads(plan)
    return dict(found[0]["Plan"])


def _scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node] if node.get("Relation Name") in TABLES and "Scan" in node["Node Type"] else []
    return found + [m for child in node.get("Plans", []) for m in _scans(child)]


def _conditions(node: dict[str, Any]) -> str:
    return node.get("Index Cond", "") + node.get("Recheck Cond", "")


def _by_run_id(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The scans of the plan that do not reach their rows through an index on a run's (or the row's) id."""
    return [
        n for n in _scans(plan) if "Seq" in n["Node Type"] or not re.search(r"\b(run_)?id\)?::text = ", _conditions(n))
    ]


def test_the_prepared_statements_of_a_signal_fan_in_keep_their_plans_on_stale_statistics():
    _stale_statistics_then_rows()
    at = now()

    # Waking waiters: driven from the waiters found by their index on name, looked up once,
    # and the runs reached by primary key alone (never a walk over the suspended runs).
    plan = _generic_plan(PG_WAKE_WAITERS, [at, [f"{RUN_TOKEN}c7"]])
    runs = [n for n in _scans(plan) if n["Relation Name"] == "durable_run"]
    waiters = [n for n in _scans(plan) if n["Relation Name"] == "durable_signalwaiter"]
    assert runs and waiters, json.dumps(plan)
    assert all(re.search(r"\bid\)?::text = ANY", _conditions(n)) for n in runs), json.dumps(plan)
    assert not any("status" in _conditions(n) for n in runs), json.dumps(plan)
    assert all("name" in _conditions(n) and "Seq" not in n["Node Type"] for n in waiters), json.dumps(plan)
    assert not any(n["Node Type"] == "Nested Loop" for n in _all(plan)), json.dumps(plan)

    # A turn that takes a signal and completes: one statement, every table reached by the run's id.
    Run.objects.filter(id="s10").update(status=RunStatus.RUNNING, locked_by="me")
    taken = CheckpointRecord(seq=1, name="go", kind=CheckpointKind.SIGNAL, status="completed", output={"n": 1})
    writes = TurnWrites(
        checkpoints=[CheckpointWrite(taken, create=False, expect=(CheckpointStatus.PENDING,))],
        consumed_signals=[BufferedSignal.objects.get(run_id="s10").id],
    )
    outcome = Outcome(RunStatus.COMPLETED, output={"n": 1}, notify=[RUN_TOKEN + "s10"])
    commit = plan_commit("s10", "me", at, at + timedelta(seconds=30), writes, outcome)
    plan = _generic_plan(*PostgresStatements(connection).commit(commit))
    assert {n["Relation Name"] for n in _scans(plan)} == set(TABLES), json.dumps(plan)
    assert _by_run_id(plan) == []

    # The lease's take, its read, and a suspension's re-check of its steps: by id only.
    for sql, params in [
        (PG_ACQUIRE, ["me", at, at, at, "s8", at]),
        (PG_LEASE_HELD, ["s10", RunStatus.RUNNING, "me"]),
        (PG_POKE_IF_SETTLED, [at, "s8", RunStatus.SUSPENDED, "s8", [1]]),
    ]:
        plan = _generic_plan(sql, params)
        assert _scans(plan) and _by_run_id(plan) == [], json.dumps(plan)


def _all(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node] + [m for child in node.get("Plans", []) for m in _all(child)]


def test_expired_leases_and_a_signal_senders_waiter_lookup_keep_their_indexes():
    """The lease index holds running runs only, the waiter index leads with the token: both still serve."""
    at = now()
    Run.objects.bulk_create(
        [Run(id=f"top{i}", workflow="wf", status=RunStatus.SUSPENDED) for i in range(SUSPENDED)], batch_size=5000
    )
    Run.objects.create(id="held", workflow="wf", status=RunStatus.RUNNING, locked_until=at)
    SignalWaiter.objects.bulk_create(
        [SignalWaiter(run_id=f"top{i}", name=f"go{i}", seq=1) for i in range(SUSPENDED)], batch_size=5000
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durable_run")
        cursor.execute("ANALYZE durable_signalwaiter")
    lookups = {
        "durable_run_running_lease": Run.objects.filter(status=RunStatus.RUNNING, locked_until__lt=at),
        "durable_waiter_name_run": SignalWaiter.objects.filter(run_id="top5", name="go5"),
    }
    for index, query in lookups.items():
        assert index in query.explain(), (index, query.explain())
