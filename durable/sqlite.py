"""SQLite set up for several writers: the embedded default must hold with more than one process.

Django's plain SQLite settings let two writers collide: a transaction begins
as a reader (``BEGIN DEFERRED``) and fails at once with "database is locked"
when it needs to write while another connection writes, whatever the busy
timeout, and the default rollback journal blocks readers during every write.
For every SQLite connection Django opens, this module (connected in the app's
``ready()``) therefore:

* switches the database to write-ahead logging (``journal_mode=WAL``: readers
  run beside the one writer; the mode is stored in the file, once);
* waits up to 30 seconds for a busy database (``busy_timeout``) unless
  ``OPTIONS["timeout"]`` says otherwise;
* starts transactions with ``BEGIN IMMEDIATE`` (the write lock up front, so a
  writer waits its turn instead of failing), unless ``OPTIONS["transaction_mode"]``
  is set.

A setting that undoes this (``transaction_mode`` ``DEFERRED``) is reported by
``manage.py check`` (``durable.W010``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core import checks

BUSY_TIMEOUT_MS = 30_000


def configure_connection(sender: Any = None, connection: Any = None, **kwargs: Any) -> None:
    """``connection_created`` receiver: WAL, a busy timeout and immediate transactions on SQLite."""
    if connection is None or connection.vendor != "sqlite":
        return
    options = connection.settings_dict.get("OPTIONS") or {}
    if connection.transaction_mode is None and "transaction_mode" not in options:
        connection.transaction_mode = "IMMEDIATE"
    with _raw(connection) as cursor:
        if "timeout" not in options:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not _in_memory(connection):
            cursor.execute("PRAGMA journal_mode = WAL")


@contextmanager
def busy_timeout(connection: Any, seconds: float | None) -> Iterator[None]:
    """Wait at most ``seconds`` for SQLite's write lock in the block (None, or not SQLite: as configured).

    Only a transaction the block begins waits for the lock (``BEGIN
    IMMEDIATE``); inside one that is open already the lock is held. The
    connection's own timeout is put back when the block ends.
    """
    if seconds is None or connection.vendor != "sqlite" or connection.in_atomic_block:
        yield
        return
    connection.ensure_connection()
    with _raw(connection) as cursor:
        previous = int(cursor.execute("PRAGMA busy_timeout").fetchone()[0])
        cursor.execute(f"PRAGMA busy_timeout = {max(int(seconds * 1000), 1)}")
    try:
        yield
    finally:
        if connection.connection is not None:
            with _raw(connection) as cursor:
                cursor.execute(f"PRAGMA busy_timeout = {previous}")


def is_busy(exc: BaseException) -> bool:
    """``exc`` is SQLite giving up on a locked database (its busy timeout passed)."""
    return "database is locked" in str(exc)


class _raw:
    """A cursor on the raw DB-API connection (no Django wrapper, no queries logged)."""

    def __init__(self, connection: Any) -> None:
        self._cursor = connection.connection.cursor()

    def __enter__(self) -> Any:
        return self._cursor

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()


def _in_memory(connection: Any) -> bool:
    """An in-memory database has no file to journal (and tests often use one)."""
    return bool(connection.is_in_memory_db())


def check_sqlite(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """System check ``durable.W010``: a SQLite database configured so that concurrent writers fail."""
    from django.conf import settings

    return sqlite_warnings(settings.DATABASES)


def sqlite_warnings(databases: dict[str, Any]) -> list[checks.CheckMessage]:
    """The ``durable.W010`` warnings for ``databases`` (a ``DATABASES``-shaped dict)."""
    found: list[checks.CheckMessage] = []
    for alias, db in databases.items():
        if not str(db.get("ENGINE", "")).endswith("sqlite3"):
            continue
        mode = str((db.get("OPTIONS") or {}).get("transaction_mode") or "").upper()
        if mode == "DEFERRED":
            found.append(
                checks.Warning(
                    f"DATABASES[{alias!r}] starts SQLite transactions DEFERRED: two processes (or threads) "
                    "writing at once fail with 'database is locked', and durable runs can be left behind.",
                    hint="Remove OPTIONS['transaction_mode'] (django-durable then uses IMMEDIATE) or set it to "
                    "'IMMEDIATE'.",
                    id="durable.W010",
                )
            )
    return found
