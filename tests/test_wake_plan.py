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
from durable.runtime import get_engine, now
from durable.store.statements import (
    PG_ACQUIRE,
    PG_CLAIM_STEP,
    PG_LEASE_HELD,
    PG_POKE_IF_SETTLED,
    PG_WAKE_WAITERS,
    col,
)
from durable.store.typed_statements import PostgresStatements

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

SUSPENDED = 20_000
TABLES = ("durable_run", "durable_signalwaiter", "durable_bufferedsignal", "durable_checkpoint")


def _series(model: Any, rows: int, **columns: str) -> None:
    """Insert ``rows`` rows of ``model`` in one statement: ``columns`` as SQL of ``i`` (1..rows), the others' defaults.

    One statement on the server: creating the objects in Python takes minutes on a loaded machine.
    """
    statements = PostgresStatements(connection)
    names, values, params = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key and field.name not in columns:
            continue  # an automatic id
        names.append(col(field))
        if field.name in columns:
            values.append(columns[field.name])
        else:
            values.append("%s")
            params.append(statements.prep(field, field.get_default()))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {model._meta.db_table} ({', '.join(names)}) "
            f"SELECT {', '.join(values)} FROM generate_series(1, {rows}) AS i",
            params,
        )


def _suspended_runs(rows: int = SUSPENDED) -> None:
    """Runs ``s1``... suspended an hour from now, each waiting on token ``__run__:c<i>`` at position 1."""
    _series(
        Run,
        rows,
        id="'s' || i",
        workflow="'wf'",
        status=f"'{RunStatus.SUSPENDED}'",
        wake_at="now() + interval '1 hour'",
    )
    _series(SignalWaiter, rows, run="'s' || i", name=f"'{RUN_TOKEN}c' || i", seq="1")


def _stale_statistics_then_rows() -> None:
    """Analyze the empty tables, then insert the suspended runs (their statistics say: no rows)."""
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ANALYZE {table}")
    _suspended_runs()
    # Each suspended on a pending signal, the signal already buffered for a tenth of them.
    _series(Checkpoint, SUSPENDED, run="'s' || i", seq="1", name="'go'", kind="'signal'", status="'pending'")
    _series(BufferedSignal, SUSPENDED // 10, run="'s' || (i * 10)", name="'go'")


def _generic_plan(sql: str, params: list[Any]) -> dict[str, Any]:
    """The generic plan of ``sql`` prepared as the store prepares it (``%s`` are its parameters)."""
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
        cursor.execute(f"PREPARE planned AS {_numbered(sql)}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        placeholders = ", ".join(["%s"] * len(params))
        cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE planned({placeholders})", params)
        plan = cursor.fetchone()[0]
        cursor.execute("DEALLOCATE planned")
    found = plan if isinstance(plan, list) else json.loads(plan)
    return dict(found[0]["Plan"])


def _numbered(sql: str) -> str:
    """``sql`` with its ``%s`` numbered as a prepared statement's ``$n``."""
    count = iter(range(1, sql.count("%s") + 1))
    return re.sub("%s", lambda _: f"${next(count)}", sql)


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
    _suspended_runs()
    Run.objects.create(id="held", workflow="wf", status=RunStatus.RUNNING, locked_until=at)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durable_run")
        cursor.execute("ANALYZE durable_signalwaiter")
    lookups = {
        "durable_run_running_lease": Run.objects.filter(status=RunStatus.RUNNING, locked_until__lt=at),
        "durable_waiter_name_run": SignalWaiter.objects.filter(run_id="s5", name=f"{RUN_TOKEN}c5"),
    }
    for index, query in lookups.items():
        assert index in query.explain(), (index, query.explain())


def test_a_step_claim_finds_its_checkpoint_by_run_and_position_on_stale_statistics():
    """Statistics taken while no step was open, then 20,000 pending steps: the claim still reads one row.

    The partial indexes of open steps lead with the status; a generic plan
    from those statistics took one of them and walked every pending step.
    """
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ANALYZE {table}")
    _suspended_runs()
    _series(Checkpoint, SUSPENDED, run="'s' || i", seq="2", name="'work'", kind="'step'", status="'pending'")
    at = now()
    active = [str(status) for status in (RunStatus.SUSPENDED, RunStatus.RUNNING)]
    plan = _generic_plan(PG_CLAIM_STEP, ["me", at, at, "s8", 2, at, active, at, at])
    checkpoints = [n for n in _scans(plan) if n["Relation Name"] == "durable_checkpoint"]
    assert checkpoints and all("run_seq" in n.get("Index Name", "") for n in checkpoints), json.dumps(plan)
    assert _by_run_id(plan) == [], json.dumps(plan)


def _runs_read() -> tuple[int, int]:
    """Rows of the runs table read so far in this transaction: by whole-table scans, and through indexes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'durable_run'")
        seq, fetched = cursor.fetchone()
        return int(seq), int(fetched)


@pytest.mark.parametrize("namespaces", [None, frozenset({"default"})], ids=["every namespace", "scoped"])
def test_a_page_claim_first_run_on_an_empty_table_reads_its_page_and_not_the_table(namespaces):
    """A worker's claims first run on an empty table, then 20,000 sleepers fall due: a page reads a page.

    A worker claims at every poll from its start, often on a new table. As
    prepared statements, the claims kept for the life of the connection a
    generic plan made on that empty table (no insert makes it plan again),
    which scanned the whole table to pick each page and again to update it:
    30,000 sleepers woken at once by two workers, autovacuum off: the last 14 s late. Planned
    afresh on those statistics, a pick still read every due run (a bitmap
    scan, then a sort).
    """
    store = get_engine().store
    at = now()
    for _ in range(8):  # past the five custom plans after which a prepared statement may go generic
        assert store.claim_due_runs("me", at, at, 100, namespaces=namespaces) == []
    _suspended_runs()
    Run.objects.update(wake_at=at - timedelta(seconds=1))
    _series(Run, 200, id="'p' || i", workflow="'wf'", status=f"'{RunStatus.PENDING}'")
    seq, fetched = _runs_read()
    page = store.claim_due_runs("me", at, at + timedelta(seconds=30), 300, namespaces=namespaces)
    assert len(page) == 300 and sum(run.id.startswith("p") for run in page) == 200
    read = tuple(after - earlier for after, earlier in zip(_runs_read(), (seq, fetched)))
    # The 200 pending runs are sorted (no index holds their order), the due ones read in order.
    assert read[0] == 0 and read[1] < 1_000, read
    assert Run.objects.filter(status=RunStatus.RUNNING, locked_by="me").count() == 300
    # The planner's settings are the caller's again: its transaction (the test's) goes on.
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_seqscan'), current_setting('enable_bitmapscan')")
        assert cursor.fetchone() == ("on", "on")


def test_a_pending_claim_among_a_backlog_walks_its_index_in_claim_order():
    """20,000 pending runs (a backlog started while no worker ran): a page of 100 reads about 100 rows.

    Highest priority first, oldest first within a priority, as ``due_runs`` orders them; without
    an index in that order the claim sorted every pending run for each page.
    """
    store = get_engine().store
    at = now()
    for _ in range(8):
        assert store.claim_due_runs("me", at, at, 100) == []
    _series(
        Run,
        SUSPENDED,
        id="'p' || i",
        workflow="'wf'",
        status=f"'{RunStatus.PENDING}'",
        priority="mod(i, 3)",
        created_at="now() - i * interval '1 second'",
    )
    expected = list(Run.objects.filter(status=RunStatus.PENDING).order_by("-priority", "created_at")[:100])
    seq, fetched = _runs_read()
    page = store.claim_due_runs("me", at, at + timedelta(seconds=30), 100)
    read = tuple(after - earlier for after, earlier in zip(_runs_read(), (seq, fetched)))
    assert [run.id for run in page] == [run.id for run in expected]
    assert read[0] == 0 and read[1] < 1_000, read
