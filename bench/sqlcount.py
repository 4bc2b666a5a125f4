"""Count SQL statements and transactions on the client side, per normalised statement.

Two hooks feed one :class:`SqlCounter`:

* Django: an ``execute_wrapper`` on every connection (every statement Django sends,
  savepoints included) and a wrapper around ``DatabaseWrapper.commit`` (explicit
  transactions). A statement outside ``atomic()`` is its own autocommit transaction.
* SQLAlchemy (DBOS): ``before_cursor_execute`` and ``commit`` engine events.

psycopg opens every explicit transaction with a ``BEGIN`` round trip of its own
and ends it with ``COMMIT``; those are counted as ``round_trips`` on top of the
statements. In a worker process (``BENCH_SQL_COUNT=1``) the counts are pushed to
Redis every 0.1 s under ``bench:sql:<system>`` so the driver can add them up.
The server's own view (write transactions by xid, ``pg_stat_statements``) is read by the driver.
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
import time
from typing import Any

_IN_LIST = re.compile(r"(%s|\$\d+|%\(\w+\)s|\?)(\s*,\s*(%s|\$\d+|%\(\w+\)s|\?))+")
_SPACES = re.compile(r"\s+")
_NUMBERS = re.compile(r"\b\d+\b")


def normalise(sql: str) -> str:
    sql = _SPACES.sub(" ", sql.strip())
    sql = _IN_LIST.sub("%s…", sql)
    return _NUMBERS.sub("N", sql)


def verb(sql: str) -> str:
    head = sql.lstrip().split(None, 1)
    return head[0].upper() if head else ""


# Threads whose statements depend on the clock, not on the workload (a worker's
# fleet heartbeat every FLEET_TTL / 3, the metrics flush, the counter's own push):
# counted, they made the difference between two batches of different lengths
# jitter by whole statements.
BACKGROUND_THREADS = ("durable-fleet", "durable-metrics", "bench-sql-flush")


class SqlCounter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.only_threads: tuple[str, ...] = ()
        self.skip_threads: tuple[str, ...] = BACKGROUND_THREADS
        self.ignored: collections.Counter[str] = collections.Counter()
        with getattr(self, "lock", threading.Lock()):
            self.statements: collections.Counter[str] = collections.Counter()
            self.total = 0
            self.explicit_txns = 0
            self.autocommit_txns = 0
            self.write_txns = 0
            self._open_write: dict[int, bool] = {}

    # -- events ------------------------------------------------------------
    def statement(self, sql: str, *, conn_key: int, in_txn: bool) -> None:
        if self._skip():
            with self.lock:
                self.ignored[threading.current_thread().name] += 1
            return
        text = normalise(sql)
        write = verb(text) in ("INSERT", "UPDATE", "DELETE") or _cte_writes(text)
        with self.lock:
            self.statements[text] += 1
            self.total += 1
            if not in_txn:
                self.autocommit_txns += 1
                if write:
                    self.write_txns += 1
            elif write:
                self._open_write[conn_key] = True

    def _skip(self) -> bool:
        """A statement of a thread that does not run the workload: counted as ``ignored``."""
        name = threading.current_thread().name
        if self.only_threads and not name.startswith(self.only_threads):
            return True
        return bool(self.skip_threads) and name.startswith(self.skip_threads)

    def commit(self, conn_key: int) -> None:
        if self._skip():
            return
        with self.lock:
            self.explicit_txns += 1
            if self._open_write.pop(conn_key, False):
                self.write_txns += 1

    def rollback(self, conn_key: int) -> None:
        if self._skip():
            return
        with self.lock:
            self._open_write.pop(conn_key, None)

    # -- results -----------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "statements": self.total,
                "explicit_txns": self.explicit_txns,
                "autocommit_txns": self.autocommit_txns,
                "write_txns": self.write_txns,
                "by_statement": dict(self.statements),
            }


# A data-modifying statement inside a WITH: ``(INSERT INTO``, ``(UPDATE "t"``, ``(DELETE FROM``, wherever
# it stands (after a parenthesis too), but not a row lock (``FOR UPDATE``, ``FOR NO KEY UPDATE SKIP LOCKED``).
_WRITE_IN_CTE = re.compile(r"\b(INSERT\s+INTO|DELETE\s+FROM|(?<!FOR )(?<!KEY )UPDATE\s+(?!SKIP\b|NOWAIT\b|OF\b)[\"\w])")


def _cte_writes(text: str) -> bool:
    """Does this WITH statement write (one of its parts inserts, updates or deletes rows)?"""
    upper = text.upper()
    return upper.startswith("WITH") and _WRITE_IN_CTE.search(upper) is not None


def per_unit(small: dict[str, Any], big: dict[str, Any], units: float, runs: int) -> dict[str, Any]:
    """Marginal cost of one step (``units`` more steps in ``big``) and the fixed cost per workflow.

    ``small``/``big``: client-side counts (:meth:`SqlCounter.snapshot` deltas) with
    ``server_write_txns`` and, when pg_stat_statements is loaded, ``pgss``.
    """
    step = diff(big, small)
    step["server_write_txns"] = big["server_write_txns"] - small["server_write_txns"]
    keys = ("statements", "explicit_txns", "autocommit_txns", "write_txns", "server_write_txns")
    per_step: dict[str, Any] = {k: step[k] / units for k in keys}
    per_step["round_trips"] = per_step["statements"] + 2 * per_step["explicit_txns"]
    per_step["sql"] = {k: round(v / units, 3) for k, v in sorted(step["by_statement"].items(), key=lambda kv: -kv[1])}
    fixed: dict[str, Any] = {k: small[k] / runs - per_step[k] for k in keys}
    fixed["round_trips"] = fixed["statements"] + 2 * fixed["explicit_txns"]
    fixed_sql: dict[str, float] = {}
    for k in set(small["by_statement"]) | set(per_step["sql"]):
        rest = small["by_statement"].get(k, 0) / runs - per_step["sql"].get(k, 0.0)
        if abs(rest) > 1e-6:
            fixed_sql[k] = round(rest, 3)
    fixed["sql"] = dict(sorted(fixed_sql.items(), key=lambda kv: -kv[1]))
    if small.get("pgss") and big.get("pgss"):
        s_by, b_by = small["pgss"]["by_statement"], big["pgss"]["by_statement"]
        pk = ("statements", "begin", "commit", "calls")
        per_step["pgss"] = {k: (big["pgss"][k] - small["pgss"][k]) / units for k in pk}
        per_step["pgss"]["sql"] = {
            q: round((b_by.get(q, 0) - s_by.get(q, 0)) / units, 3)
            for q in sorted(set(s_by) | set(b_by), key=lambda q: -(b_by.get(q, 0) - s_by.get(q, 0)))
            if abs(b_by.get(q, 0) - s_by.get(q, 0)) / units > 0.02
        }
        fixed["pgss"] = {k: small["pgss"][k] / runs - per_step["pgss"][k] for k in pk}
    return {"per_step": per_step, "per_workflow_fixed": fixed}


def add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {k: a.get(k, 0) + b.get(k, 0) for k in ("statements", "explicit_txns", "autocommit_txns", "write_txns")}
    by: collections.Counter[str] = collections.Counter(a.get("by_statement", {}))
    by.update(b.get("by_statement", {}))
    out["by_statement"] = dict(by)
    return out


def diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: after.get(k, 0) - before.get(k, 0) for k in ("statements", "explicit_txns", "autocommit_txns", "write_txns")
    }
    by: collections.Counter[str] = collections.Counter(after.get("by_statement", {}))
    by.subtract(before.get("by_statement", {}))
    out["by_statement"] = {k: v for k, v in by.items() if v}
    return out


counter = SqlCounter()


# -- Django --------------------------------------------------------------------
_django_installed = False


def install_django() -> SqlCounter:
    """Count every statement and commit of every Django connection of this process."""
    global _django_installed
    if _django_installed:
        return counter
    from django.db import connections
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.signals import connection_created

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        conn = context["connection"]
        counter.statement(sql, conn_key=id(conn), in_txn=not conn.get_autocommit())
        return execute(sql, params, many, context)

    def attach(connection: Any) -> None:
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)

    def on_created(sender: Any, connection: Any, **kwargs: Any) -> None:
        attach(connection)

    connection_created.connect(on_created, weak=False)
    for conn in connections.all(initialized_only=True):
        attach(conn)

    original_commit = BaseDatabaseWrapper.commit
    original_rollback = BaseDatabaseWrapper.rollback

    def commit(self: Any) -> None:
        original_commit(self)
        counter.commit(id(self))

    def rollback(self: Any) -> None:
        original_rollback(self)
        counter.rollback(id(self))

    BaseDatabaseWrapper.commit = commit  # type: ignore[method-assign]
    BaseDatabaseWrapper.rollback = rollback  # type: ignore[method-assign]
    _django_installed = True
    return counter


# -- SQLAlchemy (DBOS) -----------------------------------------------------------
_sa_installed = False


def install_sqlalchemy() -> SqlCounter:
    global _sa_installed
    if _sa_installed:
        return counter
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "before_cursor_execute")
    def _stmt(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        raw = conn.connection.dbapi_connection
        in_txn = not getattr(raw, "autocommit", False)
        counter.statement(statement, conn_key=id(raw), in_txn=in_txn)

    @event.listens_for(Engine, "commit")
    def _commit(conn: Any) -> None:
        counter.commit(id(conn.connection.dbapi_connection))

    @event.listens_for(Engine, "rollback")
    def _rollback(conn: Any) -> None:
        counter.rollback(id(conn.connection.dbapi_connection))

    _sa_installed = True
    return counter


# -- pushing a worker process's counts to Redis -----------------------------------
def start_flusher(system: str) -> None:
    """Every 0.1 s, add this process's counts since the last push to ``bench:sql:<system>``."""
    from bench import probe

    def loop() -> None:
        sent: dict[str, Any] = {}
        while True:
            time.sleep(0.1)
            now = counter.snapshot()
            delta = diff(now, sent)
            if delta["statements"] or delta["explicit_txns"]:
                probe.client().rpush(f"bench:sql:{system}", json.dumps(delta))
                sent = now

    threading.Thread(target=loop, name="bench-sql-flush", daemon=True).start()


def settle(system: str, quiet: float = 0.5, timeout: float = 15.0) -> None:
    """Wait until the worker processes pushed nothing under ``bench:sql:<system>`` for ``quiet`` seconds.

    A worker pushes its counts up to 0.1 s after its statements, and a run's
    last statements (its completion, what follows it) land after the driver
    saw it complete: collected too early, one batch's tail was counted with
    the next batch (or dropped with the leftovers), so the fixed cost per
    workflow came out high and the cost per step low.
    """
    from bench import probe

    c = probe.client()
    deadline = time.monotonic() + timeout
    seen = c.llen(f"bench:sql:{system}")
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = c.llen(f"bench:sql:{system}")
        if now == seen:
            return
        seen = now


def collect(system: str) -> dict[str, Any]:
    """Add up (and clear) what worker processes pushed under ``bench:sql:<system>``."""
    from bench import probe

    c = probe.client()
    total: dict[str, Any] = {}
    while True:
        item = c.lpop(f"bench:sql:{system}")
        if item is None:
            return total
        total = add(total, json.loads(item))


def enabled() -> bool:
    return os.environ.get("BENCH_SQL_COUNT") == "1"
