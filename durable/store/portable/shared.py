"""Plumbing shared by the portable store's parts: records, run inserts, waking waiters, cancel trees.

The hooks here (:meth:`StoreBase._execute`, :meth:`StoreBase._lock_event`,
:meth:`StoreBase._wake_waiters`) are where the PostgreSQL store puts its
single statements; everything else reaches the database through them or
through the ORM.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q

from durable.engine.ports import Admitted, CheckpointRecord, ClaimCheck, RunRecord
from durable.engine.vocab import ACTIVE, CheckpointStatus, RunStatus
from durable.models import Run, SignalWaiter
from durable.store.statements import INSERT_RUN, RUN_COLUMNS, RUN_FIELD


class LeaseGone(Exception):
    """Rolls a commit back when the lease compare-and-set (or a step claim) matched nothing."""


def matches(match: dict[str, Any] | None, payload: Any) -> bool:
    """``match`` is a subset of ``payload`` (every key present with an equal value)."""
    if not match:
        return True
    # An undecodable match or payload (durable.codecs) matches nothing; its run fails on its next turn.
    return (
        isinstance(match, dict)
        and isinstance(payload, dict)
        and all(k in payload and payload[k] == v for k, v in match.items())
    )


CP_FIELDS = list(CheckpointRecord.__dataclass_fields__)
_RUN_RECORD_FIELDS = list(RunRecord.__dataclass_fields__)


def claimed(claim: ClaimCheck) -> Q:
    """The condition of :class:`~durable.engine.ports.ClaimCheck` on checkpoint rows."""
    held = Q(status=CheckpointStatus.RUNNING, locked_by=claim.owner, attempts=claim.attempt)
    if claim.lapsed_at is None:
        return held
    return held & (Q(wake_at__lt=claim.lapsed_at) | Q(timeout_at__lt=claim.lapsed_at))


def run_record(row: Run) -> RunRecord:
    return RunRecord(**{name: getattr(row, name) for name in RunRecord.__dataclass_fields__})


def new_run_record(fields: dict[str, Any]) -> RunRecord:
    """The record of a run about to be inserted with ``fields``: the rest as the model's defaults give them."""
    return RunRecord(
        **{name: fields[name] if name in fields else RUN_FIELD[name].get_default() for name in _RUN_RECORD_FIELDS}
    )


def cp_record(row: dict[str, Any]) -> CheckpointRecord:
    return CheckpointRecord(**{name: row[name] for name in CP_FIELDS})


def ts(value: datetime) -> Any:
    """A datetime as a raw SQL parameter of the default connection."""
    return connection.ops.adapt_datetimefield_value(value)


class StoreBase:
    """Helpers shared by the store's parts."""

    def atomic(self) -> Any:
        """A database transaction (``ctx.transaction`` wraps user writes and a checkpoint in it)."""
        return transaction.atomic()

    def parallel_writes(self) -> bool:
        """A database without row locks (SQLite) takes one writer at a time."""
        return bool(connection.features.has_select_for_update)

    def _execute(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """Run one raw statement of :mod:`durable.store.statements`; its rows."""
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def _start_statement(self) -> str:
        """A start's insert (:data:`~durable.store.statements.INSERT_RUN`); params: :meth:`_start_params`."""
        return INSERT_RUN

    def _start_params(self, fields: dict[str, Any]) -> list[Any]:
        """The start insert's parameters: the run's columns from ``fields``, the rest at their defaults.

        Through a model instance and each field's ``get_db_prep_save``, so an
        unknown column raises ``TypeError``.
        """
        row = Run(**fields)
        return [f.get_db_prep_save(getattr(row, f.attname), connection) for f in RUN_COLUMNS]

    def _announce(self, run_ids: list[str]) -> None:
        """Announce runs made due in the current transaction to listening workers (on its commit).

        Nothing to do here: only the PostgreSQL store has notifications (``DURABLE["NOTIFY"]``).
        """
        return None

    def _insert_runs(self, rows: list[dict[str, Any]]) -> list[str]:
        """Insert runs that do not exist yet (idempotent on id); return the ids created.

        Runs of singleton workflows are admitted to their key one by one
        (pending or queued, never refused: the queue depth bounds starts only).
        """
        singles = [row for row in rows if row.get("singleton_key") is not None]
        if singles:
            rows = [row for row in rows if row.get("singleton_key") is None]
        ids = [row["id"] for row in rows]
        existing = set(Run.objects.filter(id__in=ids).values_list("id", flat=True)) if ids else set()
        new = [Run(**row) for row in rows if row["id"] not in existing]
        Run.objects.bulk_create(new)
        admitted = [row["id"] for row in singles if self._admit_new(row, None, row["created_at"]).created]
        return [run.id for run in new] + admitted

    # Singleton keys (executed by :mod:`durable.store.portable.singleton_rows`).
    def _admit_new(self, fields: dict[str, Any], max_queue_depth: int | None, now: datetime) -> Admitted:
        """Insert a run of a singleton workflow under its key's slot lock, in the caller's transaction."""
        raise NotImplementedError

    def hand_over(self, workflow: str, key: str, now: datetime) -> list[str]:
        """Admit the oldest waiting runs of ``key`` into its free slots; return them."""
        raise NotImplementedError

    def _hand_over_runs(self, run_ids: list[str], now: datetime) -> list[str]:
        """Hand over the slots the singleton runs among ``run_ids`` just freed; the runs admitted."""
        raise NotImplementedError

    def _readmit(self, run_id: str, now: datetime) -> None:
        """A requeued singleton run queues for its key again (nothing for any other run)."""
        raise NotImplementedError

    def _lock_event(self, name: str) -> None:
        """Serialise publishers and waiters of one event name until the transaction ends.

        Nothing to do where the database serialises all writers (SQLite). The
        ORM has no lock on a name: on a database that takes several writers,
        a publish racing a waiter's registration can miss it, and the run is
        then woken by its reconcile wake (``RECONCILE_AFTER``), not lost.
        PostgreSQL's store takes an advisory lock.
        """

    def _wake_waiters(self, tokens: list[str], now: datetime) -> list[str]:
        """Wake the suspended runs waiting on any of ``tokens``; return their ids."""
        ids = list(SignalWaiter.objects.filter(name__in=tokens).values_list("run_id", flat=True).distinct())
        if not ids:
            return []
        Run.objects.filter(id__in=ids, status=RunStatus.SUSPENDED).update(wake_at=now)
        return ids

    def _subtree(self, roots: list[str]) -> list[str]:
        """``roots`` and all their active descendants (children, grandchildren...)."""
        found = list(roots)
        frontier = list(roots)
        while frontier:
            frontier = list(Run.objects.filter(parent_id__in=frontier, status__in=ACTIVE).values_list("id", flat=True))
            frontier = [rid for rid in frontier if rid not in found]
            found += frontier
        return found

    def _cancel_tree(self, roots: list[str], now: datetime) -> list[str]:
        """Cancel ``roots`` and their active descendants; return the ids cancelled."""
        if not roots:
            return []
        tree = self._subtree(roots)
        ids = list(Run.objects.filter(id__in=tree, status__in=ACTIVE).values_list("id", flat=True))
        Run.objects.filter(id__in=ids, status__in=ACTIVE).update(
            status=RunStatus.CANCELLED,
            finished_at=now,
            updated_at=now,
            wake_at=None,
            locked_by=None,
            locked_until=None,
        )
        SignalWaiter.objects.filter(run_id__in=ids).delete()
        return ids
