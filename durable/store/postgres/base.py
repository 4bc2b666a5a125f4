"""What every part of the PostgreSQL store shares: its cursors, its statements, event locks and wakes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from durable import conf
from durable.store.portable.shared import StoreBase
from durable.store.postgres.cursors import Cursors
from durable.store.statements import (
    EVENT_LOCK_PREFIX,
    INSERT_RUN,
    PG_EVENT_LOCK,
    PG_INSERT_RUN_NOTIFY,
    PG_NOTIFY_RUNS,
    PG_WAKE_WAITERS,
)
from durable.store.typed_statements import PostgresStatements


class PostgresBase(StoreBase):
    """State of one PostgreSQL store: its preparing cursors and its column casts (no module globals)."""

    def __init__(self) -> None:
        self._cursors = Cursors()
        self._statements = PostgresStatements(connection)

    def _execute(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        return self._cursors.execute(sql, params)

    def _notifying(self) -> bool:
        """Does this process announce new work with ``NOTIFY``? (``DURABLE["NOTIFY"]`` on the manual transport.)

        Only a process that runs nothing itself needs to: on ``inline`` the
        process that starts or wakes a run runs its turn, and on Celery the
        broker carries the announcement.
        """
        settings = conf.get()
        return settings.notify and settings.transport == "manual"

    def _start_statement(self) -> str:
        """The start's insert; announcing the new run in the same statement when :meth:`_notifying`."""
        return PG_INSERT_RUN_NOTIFY if self._notifying() else INSERT_RUN

    def _start_params(self, fields: dict[str, Any]) -> list[Any]:
        """The start insert's parameters, prepared as the commit statements prepare theirs.

        For these column types on PostgreSQL, what the portable store's model
        instance and ``get_db_prep_save`` give is the value itself; JSON goes
        as its text, encoded with its field's encoder (sealed first for
        payload columns), which the server parses as the jsonb column's value.
        """
        return self._statements.run_row(fields)

    def _announce(self, run_ids: list[str]) -> None:
        """``pg_notify`` each run's namespace in the current transaction (delivered only if it commits)."""
        if run_ids and self._notifying():
            self._execute(PG_NOTIFY_RUNS, [run_ids])

    def _lock_event(self, name: str) -> None:
        """An advisory lock per event name, held until the transaction ends."""
        self._execute(PG_EVENT_LOCK, [EVENT_LOCK_PREFIX + name])

    def _wake_waiters(self, tokens: list[str], now: datetime) -> list[str]:
        """Wake the suspended runs with a waiter on any of ``tokens``, in one statement; their ids."""
        return [row[0] for row in self._execute(PG_WAKE_WAITERS, [now, tokens])]
