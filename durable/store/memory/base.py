"""Shared plumbing of the memory store: the lock, atomic blocks, and helpers its parts share."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar, cast

from durable.engine.clock import Clock, SystemClock
from durable.engine.ports import Admitted
from durable.engine.vocab import ACTIVE, RunStatus
from durable.store.memory.tables import Row, Tables, new_run

F = TypeVar("F", bound=Callable[..., Any])


def atomically(fn: F) -> F:
    """Run a store method as one atomic block: all of its writes or none (see :meth:`MemoryBase.atomic`)."""

    @functools.wraps(fn)
    def wrapper(self: MemoryBase, *args: Any, **kwargs: Any) -> Any:
        with self.atomic():
            return fn(self, *args, **kwargs)

    return cast(F, wrapper)


def locked(fn: F) -> F:
    """Run a store read under the lock (it sees no half-done write)."""

    @functools.wraps(fn)
    def wrapper(self: MemoryBase, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return fn(self, *args, **kwargs)

    return cast(F, wrapper)


def dead_letter(message: str) -> dict[str, Any]:
    """The error of a run given up on after too many failed or orphaned turns."""
    return {"message": message, "code": "max_recovery_attempts", "retryable": False, "type": "Dead", "traceback": None}


def matches(match: dict[str, Any] | None, payload: Any) -> bool:
    """``match`` is a subset of ``payload`` (every key present with an equal value)."""
    if not match:
        return True
    return isinstance(payload, dict) and all(k in payload and payload[k] == v for k, v in match.items())


class MemoryBase:
    """State, lock and atomic blocks.

    Concurrency: one re-entrant lock serialises every read and write, so each
    store method sees and leaves a consistent state, as one database
    transaction would. :meth:`atomic` holds the lock for the whole block: a
    caller's block of several store calls is isolated from other threads too.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.tables = Tables()
        self._lock = threading.RLock()
        self._depth = 0
        # Only for columns the caller leaves unset (a run's created_at, a worker's started_at).
        self._clock: Clock = clock or SystemClock()

    def parallel_writes(self) -> bool:
        """Each write holds the lock briefly; turns' own work runs outside it."""
        return True

    def transaction_depth(self) -> int:
        """The :meth:`atomic` blocks open (only ever the thread holding the lock is inside one)."""
        return self._depth

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Commit-or-nothing: an exception leaving the block undoes every write made in it.

        Nested blocks are savepoints: a failed inner block undoes only its own writes.
        """
        with self._lock:
            mark = self.tables.mark()
            self._depth += 1
            try:
                yield
            except BaseException:
                self.tables.rollback(mark)
                raise
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.tables.forget()

    # -- helpers (callers hold the lock) ---------------------------------------------
    def _run(self, run_id: str | None) -> Row | None:
        return self.tables.runs.get(run_id) if run_id is not None else None

    def _runs_with(self, ids: Iterable[str], statuses: Iterable[str]) -> list[Row]:
        wanted = set(statuses)
        rows = (self.tables.runs.get(run_id) for run_id in dict.fromkeys(ids))
        return [row for row in rows if row is not None and row["status"] in wanted]

    def _insert_runs(self, rows: list[dict[str, Any]]) -> list[str]:
        """Insert runs that do not exist yet (idempotent on id); return the ids created.

        Runs of singleton workflows are admitted to their key (pending or queued, never refused).
        """
        created = []
        for fields in rows:
            if fields.get("singleton_key") is not None:
                if self._admit_new(fields, None, fields["created_at"]).created:
                    created.append(fields["id"])
            elif fields["id"] not in self.tables.runs:
                self.tables.put(self.tables.runs, fields["id"], new_run(fields, self._clock.now()))
                created.append(fields["id"])
        return created

    # Singleton keys (executed by :mod:`durable.store.memory.singletons`).
    def _admit_new(self, fields: dict[str, Any], max_queue_depth: int | None, now: datetime) -> Admitted:
        """Insert a run of a singleton workflow under its key (the caller holds the lock)."""
        raise NotImplementedError

    def hand_over(self, workflow: str, key: str, now: datetime) -> list[str]:
        """Admit the oldest waiting runs of ``key`` into its free slots; return them."""
        raise NotImplementedError

    def _hand_over_runs(self, run_ids: list[str], now: datetime) -> list[str]:
        """Hand over the slots the singleton runs among ``run_ids`` just freed; the runs admitted."""
        raise NotImplementedError

    def _readmit(self, row: Row, now: datetime) -> None:
        """A requeued singleton run queues for its key again (nothing for any other run)."""
        raise NotImplementedError

    def _wake(self, run_ids: Iterable[str], now: datetime) -> list[str]:
        """Make the suspended runs among ``run_ids`` due at ``now``; return those woken."""
        woken = self._runs_with(run_ids, (RunStatus.SUSPENDED,))
        for row in woken:
            self.tables.set(row, wake_at=now)
        return [row["id"] for row in woken]

    def _wake_waiters(self, tokens: list[str], now: datetime) -> list[str]:
        """Wake the suspended runs waiting on any of ``tokens``; return their ids."""
        wanted = set(tokens)
        waiting = [w["run_id"] for w in self.tables.waiters.values() if w["name"] in wanted]
        return self._wake(waiting, now)

    def _delete_waiters(self, run_ids: Iterable[str]) -> None:
        ids = set(run_ids)
        for key in [k for k, w in self.tables.waiters.items() if w["run_id"] in ids]:
            self.tables.drop(self.tables.waiters, key)

    def _subtree(self, roots: list[str]) -> list[str]:
        """``roots`` and all their active descendants (children, grandchildren...)."""
        found = list(roots)
        frontier = set(roots)
        while frontier:
            children = [
                row["id"]
                for row in self.tables.runs.values()
                if row["parent_id"] in frontier and row["status"] in ACTIVE and row["id"] not in found
            ]
            found += children
            frontier = set(children)
        return found

    def _cancel_tree(self, roots: list[str], now: datetime) -> list[str]:
        """Cancel ``roots`` and their active descendants; return the ids cancelled."""
        if not roots:
            return []
        cancelled = self._runs_with(self._subtree(roots), ACTIVE)
        for row in cancelled:
            self._release(row, now, RunStatus.CANCELLED, finished_at=now, wake_at=None)
        ids = [row["id"] for row in cancelled]
        self._delete_waiters(ids)
        return ids

    def _release(self, row: Row, now: datetime, status: str, **changes: Any) -> None:
        """Write ``status`` (and ``changes``) and hand the lease back, whoever held it."""
        self.tables.set(row, status=status, updated_at=now, locked_by=None, locked_until=None, **changes)

    def _held(self, run_id: str, owner: str) -> Row | None:
        """The run if ``owner`` holds its lease (running, locked by them)."""
        row = self.tables.runs.get(run_id)
        if row is None or row["status"] != RunStatus.RUNNING or row["locked_by"] != owner:
            return None
        return row
