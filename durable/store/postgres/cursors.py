"""Cursors for the PostgreSQL store's statements: Django's, or ones that prepare every statement.

With ``PREPARED_STATEMENTS`` (on by default) each statement of
:mod:`durable.store.statements` is parsed and planned once per connection,
except the claims of due runs, planned at every call (:meth:`Cursors.by_index`);
Django's own queries are never prepared. Both kinds of cursor go through
Django's cursor wrapper, so ``execute_wrapper`` hooks, query logging and
error translation see these statements as any other.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

from durable import conf

# Django turns psycopg's automatic preparation off (prepare_threshold None), and psycopg then
# refuses even an explicit prepare=True. A threshold no statement reaches turns explicit
# preparation back on without preparing anything else: Django's own cursors bind on the
# client and never prepare.
_EXPLICIT_ONLY = 1 << 62


# A path priced out costs 10^10: JIT would then compile the statement (a quarter of a second).
_PRICED_OUT = ("enable_seqscan", "enable_bitmapscan", "enable_sort", "jit")
# The settings as they were, then off for the rest of the transaction (``is_local``).
_BY_INDEX = "SELECT " + ", ".join(
    [f"current_setting('{name}')" for name in _PRICED_OUT]
    + [f"set_config('{name}', 'off', true)" for name in _PRICED_OUT]
)
_RESTORE = "SELECT " + ", ".join(f"set_config('{name}', %s, true)" for name in _PRICED_OUT)


class Cursors:
    """Runs the store's statements; owns the preparing cursor class (built on first use).

    Thread-safety: one instance serves every thread. Each thread keeps its own
    preparing cursor on its own connection (:meth:`execute`); a statement's
    rows are fetched before it returns, so the greenlets of resident workflows,
    which share their thread's connection, never interleave on it.
    """

    def __init__(self) -> None:
        self._preparing: Any = None
        self._kept = threading.local()

    def _preparing_class(self) -> Any:
        """A server-side binding cursor class that prepares every statement it runs.

        The statements are few and fixed (a commit's text varies only with the
        shape of its plan), so each is prepared once per connection; psycopg
        keeps the most recent ``prepared_max`` of them. Imported on first use:
        the PostgreSQL backend needs psycopg.
        """
        if self._preparing is None:
            from django.db.backends.postgresql import base

            server_binding: Any = base.ServerBindingCursor

            class PreparingCursor(server_binding):  # type: ignore[misc]
                def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                    return super().execute(query, params, prepare=True, **kwargs)

            self._preparing = PreparingCursor
        return self._preparing

    def cursor(self, *, prepare: bool = True) -> Any:
        """A cursor that prepares what it runs, or with ``prepare=False`` one that binds on the server only."""
        # The connection of this thread, looked up once: every attribute of ``django.db.connection``
        # is a lookup of its own in the thread's connections.
        db = connections[DEFAULT_DB_ALIAS]
        if not conf.get().prepared_statements:
            wrapped = db.cursor()
            _driver_timestamps(db, wrapped.cursor)
            return wrapped
        db.close_if_health_check_failed()
        db.ensure_connection()
        db.validate_thread_sharing()
        raw: Any = db.connection
        if raw.prepare_threshold is None:
            raw.prepare_threshold = _EXPLICIT_ONLY
        if prepare:
            cursor = self._preparing_class()(raw)
        else:
            from django.db.backends.postgresql import base

            binding: Any = base.ServerBindingCursor
            cursor = binding(raw)
        _driver_timestamps(db, cursor)
        return _LoggingCursor(cursor, db) if db.queries_logged else db.make_cursor(cursor)

    def execute(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """Run one statement, prepared; its rows (none for a statement that returns nothing).

        On this thread's kept cursor while its connection is the one it was
        opened on (a cursor per statement costs a driver cursor and its
        adapters map every time); a closed or replaced connection gets a new
        one. The kept cursor holds its last result until the thread's next
        statement (the rows are copied out before this returns). While
        queries are logged, or with ``PREPARED_STATEMENTS`` off, each
        statement gets a cursor of its own (Django's logging one when logged).
        """
        db = connections[DEFAULT_DB_ALIAS]
        if db.queries_logged or not conf.get().prepared_statements:
            with self.cursor() as cursor:
                cursor.execute(sql, params)
                return _rows(cursor)
        db.close_if_health_check_failed()
        db.ensure_connection()  # also refuses to run in an event loop's thread, as Django's cursors do
        kept = getattr(self._kept, "cursor", None)
        if kept is None or kept.cursor.connection is not db.connection:
            kept = self._kept.cursor = self.cursor()
        else:
            db.validate_thread_sharing()
        kept.execute(sql, params)
        return _rows(kept)

    @contextmanager
    def by_index(self) -> Iterator[None]:
        """A transaction whose statements are planned with whole-table scans, bitmap scans and sorts priced out.

        For page claims (``ORDER BY ... LIMIT ... FOR UPDATE SKIP LOCKED``):
        their one good plan walks an index in order and stops at the page's
        end, whatever the table holds. Priced from statistics that predate
        the rows (a new table, or autovacuum off or late), the planner took a
        bitmap scan of every due run and a sort, or a scan of the whole
        table, once per page. The settings are changed for this transaction
        only, and restored on leaving when the caller's transaction goes on.
        Run the statements with :meth:`execute_unprepared`: a prepared
        statement's plan would last the connection's life. Costs three round
        trips (the begin, the settings, the commit).
        """
        nested = connection.in_atomic_block
        with transaction.atomic(savepoint=False), self.cursor(prepare=False) as cursor:
            cursor.execute(_BY_INDEX)
            before = cursor.fetchone()
            yield
            if nested:
                cursor.execute(_RESTORE, list(before[: len(_PRICED_OUT)]))

    def execute_unprepared(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """Run one statement planned for this call's parameters and the tables as they are now."""
        with self.cursor(prepare=False) as cursor:
            cursor.execute(sql, params)
            return _rows(cursor)

    def history(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """Run a history read; its rows.

        On a cursor of its own, closed when read: the kept cursor would hold
        a long history's result until this thread's next statement.
        """
        with self.cursor() as cursor:
            cursor.execute(sql, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall()
            return rows


class _LoggingCursor(CursorDebugWrapper):
    """Django's logging cursor, logging each statement with its parameters bound.

    Django logs what the driver reports as the last query, and psycopg keeps
    none for a prepared statement: ``connection.queries`` and the
    ``django.db.backends`` log would show ``None``. The text logged here is
    composed on the client, as Django composes its own queries; the statement
    itself still runs prepared, through the same wrappers (``execute_wrapper``
    hooks, error translation).
    """

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(_bound(self.db, sql, params), params):
            return CursorWrapper.execute(self, sql, params)


def _bound(db: Any, sql: str, params: Any) -> str:
    """``sql`` with ``params`` bound, for a log; ``sql`` itself when the driver cannot compose them."""
    import psycopg

    try:
        return str(db.ops.compose_sql(sql, params))
    except psycopg.Error:
        return sql


def _rows(cursor: Any) -> list[tuple[Any, ...]]:
    """The rows of the statement ``cursor`` (Django's wrapper) ran; none if it returns no columns.

    Read from the driver's cursor: the statement's result is already in the
    client, so nothing here can raise a database error for Django's wrapper
    to translate, and the result's column count costs nothing where the
    wrapper's ``description`` builds a column object per column.
    """
    raw = cursor.cursor
    result = raw.pgresult
    if result is None or not result.nfields:
        return []
    rows: list[tuple[Any, ...]] = raw.fetchall()
    return rows


def _driver_timestamps(db: Any, raw: Any) -> None:
    """Have the driver's cursor ``raw`` parse ``timestamptz`` with psycopg's own text loader.

    Django loads every ``timestamptz`` through a Python subclass of that
    loader, to set the connection's time zone; with time zone support on,
    the session's time zone is that zone already, so the driver's own loader
    (in C with psycopg's binary build) gives the same instants in the same
    zone. Without it (``USE_TZ = False``) Django's loader stays.
    """
    if db.timezone is None:
        return
    import psycopg
    from psycopg.pq import Format

    oid = raw.adapters.types["timestamptz"].oid
    raw.adapters.register_loader("timestamptz", psycopg.adapters.get_loader(oid, Format.TEXT))
