"""The PostgreSQL hot path: what an in-process step costs, and prepared statements.

Outside a transaction every statement is its own commit, so "one statement
per step, none inside an explicit transaction" is "one round trip and one
commit per step".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import durable
from durable.models import Run
from durable.runtime import get_engine
from durable.store.postgres.cursors import Cursors

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _noop(i: int) -> int:
    return i


@durable.workflow(name="hp_local_chain")
def hp_local_chain(ctx: durable.WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += ctx.local_step(f"s{i}", _noop, i)
    return total


@contextmanager
def _statements() -> Iterator[list[tuple[str, bool]]]:
    """Every statement this connection runs: its SQL and whether it ran inside a transaction."""
    seen: list[tuple[str, bool]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


def _run(n: int) -> list[tuple[str, bool]]:
    run_id = durable.start("hp_local_chain", n)
    with _statements() as seen:
        get_engine().run_turn(run_id)
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.output) == ("completed", sum(range(n)))
    return seen


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_each_in_process_step_is_one_statement_and_one_commit():
    _run(1)  # warm: registry, connection
    short, long = _run(2), _run(6)
    assert (len(long) - len(short)) / 4 == 1
    # autocommit: each of those statements committed on its own
    assert not any(in_txn for _, in_txn in long)


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _orm_query(run_id: str) -> None:
    for _ in range(3):
        assert Run.objects.filter(pk=run_id, status="completed").exists()


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_hot_path_statements_are_prepared_and_django_queries_are_not():
    connection.close()  # a new session: nothing prepared yet
    seen = _run(3)
    _orm_query(Run.objects.latest("created_at").pk)
    prepared = _prepared()
    commits = [sql for sql, _ in seen if sql.startswith("WITH lease AS")]
    assert commits, "no turn commit seen"
    # psycopg prepares the text with $n placeholders: compare the shape before the first one.
    assert any(text.startswith(commits[0].split("%s")[0]) for text in prepared)
    assert not any('"durable_run"."status" = ' in text and "LIMIT 1" in text for text in prepared)


@override_settings(DURABLE={"TRANSPORT": "manual", "PREPARED_STATEMENTS": False})
def test_prepared_statements_can_be_turned_off():
    connection.close()
    _run(3)
    assert _prepared() == []


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_the_kept_cursor_follows_its_connection_and_query_logging():
    _run(1)  # this thread's store cursor is kept on this connection
    connection.close()
    _run(1)  # on the closed connection's cursor this would fail: a new cursor on the new connection
    with CaptureQueriesContext(connection) as logged, _statements() as seen:
        _run(2)
    # While queries are logged the store's statements go through Django's logging cursor too.
    assert len(seen) >= 4  # the start, the acquire, two steps, the ORM's read
    assert len(logged.captured_queries) == len(seen)


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_a_logged_statement_is_logged_with_its_parameters_bound():
    """Query logging (DEBUG, debug toolbars, CaptureQueriesContext) sees the prepared statements' text."""
    durable.start("hp_local_chain", 1)  # warm: each statement is prepared on this connection already
    with CaptureQueriesContext(connection) as logged:
        run_id = durable.start("hp_local_chain", 2)
        get_engine().run_turn(run_id)
    logged_sql = [query["sql"] for query in logged.captured_queries]
    assert all(isinstance(sql, str) for sql in logged_sql)
    start = next(sql for sql in logged_sql if sql.startswith('INSERT INTO "durable_run"'))
    assert f"'{run_id}'" in start  # bound, not a placeholder
    assert "%s" not in start


def _read_times(run_id: str) -> tuple[Any, ...]:
    """The run's timestamps read by the store's own cursors, and the loader those cursors use."""
    from psycopg.pq import Format

    cursors = Cursors()
    rows = cursors.execute('SELECT "created_at", "finished_at" FROM "durable_run" WHERE "id" = %s', [run_id])
    with cursors.cursor() as cursor:
        oid = cursor.cursor.adapters.types["timestamptz"].oid
        loader = cursor.cursor.adapters.get_loader(oid, Format.TEXT)
    return rows[0], loader


@override_settings(DURABLE={"TRANSPORT": "manual"})
@pytest.mark.parametrize("prepared", [True, False])
def test_the_store_reads_the_orms_instants_with_the_drivers_timestamp_loader(prepared: bool) -> None:
    run_id = durable.start("hp_local_chain", 1)
    get_engine().run_turn(run_id)
    orm = Run.objects.get(pk=run_id)
    with override_settings(DURABLE={"TRANSPORT": "manual", "PREPARED_STATEMENTS": prepared}):
        times, loader = _read_times(run_id)
    assert times == (orm.created_at, orm.finished_at)
    assert all(t.utcoffset() == timedelta(0) for t in times)
    # psycopg's own loader (in C with its binary build), not Django's Python subclass of it
    assert not loader.__module__.startswith("django")


@override_settings(DURABLE={"TRANSPORT": "manual"}, USE_TZ=False)
def test_without_time_zone_support_the_store_reads_naive_timestamps_as_the_orm_does() -> None:
    connection.close()  # the next connection is set up without time zone support
    run_id = durable.start("hp_local_chain", 1)
    get_engine().run_turn(run_id)
    times, loader = _read_times(run_id)
    orm = Run.objects.get(pk=run_id)
    assert times == (orm.created_at, orm.finished_at)
    assert all(t.tzinfo is None for t in times)
    assert loader.__module__.startswith("django")
    connection.close()


@durable.workflow(name="hp_singleton", singleton=durable.Singleton(key="k"))
def hp_singleton(ctx: durable.WorkflowContext, data: dict[str, Any]) -> str:
    return str(data["k"])


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_a_start_without_singleton_is_one_insert_and_its_run_never_reads_a_slot():
    durable.start("hp_local_chain", 1)  # warm
    with _statements() as seen:
        run_id = durable.start("hp_local_chain", 1)
    assert [sql.split()[0] for sql, _ in seen] == ["INSERT"]
    with _statements() as seen:
        get_engine().run_turn(run_id)
    assert Run.objects.get(pk=run_id).status == "completed"
    assert not any("durable_singletonslot" in sql for sql, _ in seen)
    # A singleton's start locks its key in one transaction; its final commit hands the slot over.
    with _statements() as seen:
        singleton_id = durable.start("hp_singleton", {"k": 1})
    slot = [in_txn for sql, in_txn in seen if "durable_singletonslot" in sql]
    assert slot and all(slot)
    with _statements() as seen:
        get_engine().run_turn(singleton_id)
    assert any("durable_singletonslot" in sql for sql, _ in seen)


def _verbs(seen: list[tuple[str, bool]]) -> list[str]:
    return [sql.split()[0] for sql, _ in seen]


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_a_fresh_turn_confirms_its_lease_by_the_write_that_took_it():
    _run(1)  # warm
    seen = _run(3)
    # The acquire, then one commit per step: no lease read before the first step.
    assert _verbs(seen) == ["UPDATE", "WITH", "WITH", "WITH"]
    assert not any(sql.startswith("SELECT 1 FROM") for sql, _ in seen)


_effects: list[str] = []


@durable.step(name="hp_remote")
def hp_remote() -> int:
    return 1


@durable.workflow(name="hp_resumed")
def hp_resumed(ctx: durable.WorkflowContext) -> int:
    got = int(ctx.step(hp_remote))
    return int(ctx.local_step("after", lambda: _effects.append("after") or got + 1))


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_a_resumed_turn_still_reads_its_lease_before_its_first_side_effect():
    run_id = durable.start("hp_resumed")
    get_engine().run_turn(run_id)
    assert get_engine().execute_step(run_id, 1, continue_turn=False) == "completed"
    with _statements() as seen:
        assert get_engine().run_turn(run_id) == "completed"
    # acquire, history, the lease read before "after", the final commit
    assert _verbs(seen) == ["UPDATE", "SELECT", "SELECT", "WITH"]
    assert seen[2][0].startswith("SELECT 1 FROM")
    assert _effects == ["after"]


@durable.workflow(name="hp_cancelled_before_first_step")
def hp_cancelled_before_first_step(ctx: durable.WorkflowContext) -> int:
    # A cancel that lands after the lease was taken, before the first side effect.
    # The lint would rightly report it (DL008); here it is the point of the test.
    durable.cancel(ctx.run_id)  # durable: ignore
    return int(ctx.local_step("first", lambda: _effects.append("first") or 1))


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_a_cancel_before_a_fresh_turns_first_step_is_seen_at_its_commit():
    _effects.clear()
    run_id = durable.start("hp_cancelled_before_first_step")
    assert get_engine().run_turn(run_id) == "lost"
    run = Run.objects.get(pk=run_id)
    # The step ran once (as a cancel during it would let it), and nothing after the cancel was written.
    assert _effects == ["first"]
    assert run.status == "cancelled" and not run.checkpoints.exists()


@durable.workflow(name="hp_waits_signal")
def hp_waits_signal(ctx: durable.WorkflowContext) -> Any:
    return ctx.wait_signal("go")


@override_settings(DURABLE={"TRANSPORT": "manual"})
def test_a_turn_that_takes_a_signal_and_completes_commits_in_one_statement():
    """Lease, history, the signal's read and one commit: no transaction, no wake of waiters nobody registered."""
    for i in range(2):  # the first warms the registry and the connection
        run_id = durable.start("hp_waits_signal", run_id=f"hp-sig-{i}")
        get_engine().run_turn(run_id)
        durable.signal(run_id, "go", {"n": i})
        with _statements() as seen:
            get_engine().run_turn(run_id)
        run = Run.objects.get(pk=run_id)
        assert (run.status, run.output) == ("completed", {"n": i})
    kinds = [sql.split()[0] for sql, _ in seen]
    assert kinds == ["UPDATE", "SELECT", "SELECT", "WITH"], [sql[:80] for sql, _ in seen]
    assert not any(in_txn for _, in_txn in seen)
    commit = seen[-1][0]
    assert "durable_bufferedsignal" in commit and "durable_signalwaiter" in commit
