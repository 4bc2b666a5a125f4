"""Runs: creation, leases, signals, cancellation, repairs and reads."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Min, Q

from durable.engine.ports import (
    RunRecord,
)
from durable.engine.vocab import RUN_TOKEN
from durable.exceptions import InvalidRunState, RunNotFound
from durable.models import (
    ACTIVE,
    TERMINAL,
    BufferedSignal,
    Checkpoint,
    Run,
    RunStatus,
    SignalWaiter,
)
from durable.store import _pg
from durable.store._base import (
    CP_STATUS,
    RESETTABLE,
    StoreBase,
    _run_record,
)


class RunsStore(StoreBase):
    def create_run(self, fields: dict[str, Any]) -> bool:
        """Insert the run unless one with that id exists (idempotent start); True if inserted.

        One statement (``INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id``):
        concurrent callers are decided by the primary key, and a loser on
        PostgreSQL waits for the winner's transaction before learning it lost.
        """
        row = Run(**fields)
        columns = list(Run._meta.concrete_fields)
        quote = connection.ops.quote_name
        names = ", ".join(quote(f.column or f.name) for f in columns)
        sql = (
            f"INSERT INTO {quote(Run._meta.db_table)} ({names}) VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT ({quote('id')}) DO NOTHING RETURNING {quote('id')}"
        )
        params = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in columns]
        if _pg.usable():
            return bool(_pg.execute(sql, params))
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone() is not None

    def create_leased_run(
        self, fields: dict[str, Any], owner: str, now: datetime, lease_until: datetime
    ) -> RunRecord | None:
        """Insert the run already leased to ``owner`` for its first turn; None if the id exists.

        The same single idempotent statement as :meth:`create_run`; the run
        starts ``running`` (turn 1) instead of ``pending``.
        """
        leased = {
            **fields,
            "status": RunStatus.RUNNING,
            "locked_by": owner,
            "locked_until": lease_until,
            "turns": 1,
            "started_at": now,
            "updated_at": now,
        }
        if not self.create_run(leased):
            return None
        return _run_record(Run(**leased))

    def get_run(self, run_id: str) -> RunRecord | None:
        row = Run.objects.filter(id=run_id).first()
        return _run_record(row) if row is not None else None

    def acquire(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        """Take the lease of a pending run, or of a suspended run whose wake is due.

        One compare-and-set statement that returns the run as it now is.
        """
        if _pg.usable():
            return _pg.acquire(run_id, owner, now, lease_until)
        quote = connection.ops.quote_name
        ts = connection.ops.adapt_datetimefield_value
        columns = ", ".join(quote(f.column or f.name) for f in Run._meta.concrete_fields)
        sql = (
            f"UPDATE {quote(Run._meta.db_table)} SET {quote('status')} = %s, {quote('locked_by')} = %s, "
            f"{quote('locked_until')} = %s, {quote('updated_at')} = %s, "
            f"{quote('started_at')} = COALESCE({quote('started_at')}, %s), {quote('turns')} = {quote('turns')} + 1 "
            f"WHERE {quote('id')} = %s AND ({quote('status')} = %s OR ({quote('status')} = %s AND "
            f"{quote('wake_at')} <= %s)) RETURNING {columns}"
        )
        params = [
            RunStatus.RUNNING,
            owner,
            ts(lease_until),
            ts(now),
            ts(now),
            run_id,
            RunStatus.PENDING,
            RunStatus.SUSPENDED,
            ts(now),
        ]
        rows = list(Run.objects.raw(sql, params))
        return _run_record(rows[0]) if rows else None

    def renew_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> bool:
        return bool(
            Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(locked_until=lease_until)
        )

    def lease_held(self, run_id: str, owner: str) -> bool:
        """Does ``owner`` still hold the run's lease (not cancelled, not taken over)? A read."""
        if _pg.usable():
            return _pg.lease_held(run_id, owner)
        return Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).exists()

    def release(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        wake_at: datetime,
        count_recovery: bool,
        max_attempts: int | None = None,
    ) -> str | None:
        """Hand a running run back (suspended, due at ``wake_at``) without an outcome.

        With ``count_recovery`` the handback counts as a recovery; past
        ``max_attempts`` the run goes ``dead`` instead. Returns the status
        written, or None when the lease was no longer ours.
        """
        mine = Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner)
        if count_recovery and max_attempts is not None:
            dead = mine.filter(recovery_attempts__gte=max_attempts).update(
                status=RunStatus.DEAD,
                error={
                    "message": f"the run's turn failed {max_attempts + 1} times in a row; giving up",
                    "code": "max_recovery_attempts",
                    "retryable": False,
                    "type": "Dead",
                    "traceback": None,
                },
                recovery_attempts=F("recovery_attempts") + 1,
                finished_at=now,
                updated_at=now,
                wake_at=None,
                locked_by=None,
                locked_until=None,
            )
            if dead:
                return RunStatus.DEAD
        fields: dict[str, Any] = dict(
            status=RunStatus.SUSPENDED, wake_at=wake_at, locked_by=None, locked_until=None, updated_at=now
        )
        if count_recovery:
            fields["recovery_attempts"] = F("recovery_attempts") + 1
        return RunStatus.SUSPENDED if mine.update(**fields) else None

    def block(self, run_id: str, owner: str, now: datetime, reason: dict[str, Any]) -> bool:
        return bool(
            Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(
                status=RunStatus.BLOCKED, error=reason, locked_by=None, locked_until=None, updated_at=now
            )
        )

    def unblock(self, run_ids: Iterable[str], now: datetime) -> int:
        return Run.objects.filter(id__in=list(run_ids), status=RunStatus.BLOCKED).update(
            status=RunStatus.PENDING, error=None, updated_at=now
        )

    def signal(self, run_id: str, name: str, payload: Any, now: datetime) -> bool:
        """Buffer a signal and wake the run if it waits for that name. Returns True if woken."""
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status in TERMINAL:
                raise InvalidRunState(f"run {run_id!r} is {status}; it takes no more signals")
            BufferedSignal.objects.create(run_id=run_id, name=name, payload=payload, created_at=now)
            if SignalWaiter.objects.filter(run_id=run_id, name=name).exists():
                return bool(
                    Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now, updated_at=now)
                )
        return False

    def cancel(self, run_id: str, now: datetime, compensate: bool = False) -> tuple[bool, list[str]]:
        """Cancel an active run and, recursively, its active children.

        Returns (whether anything was cancelled, runs to dispatch a turn for).
        With ``compensate`` the runs are not stopped here: they are marked and
        woken so their next turn undoes their completed steps and ends
        ``cancelled`` (a blocked run, which cannot execute, is cancelled outright).
        """
        woken: list[str] = []
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in ACTIVE:
                return False, []
            if not compensate or status == RunStatus.BLOCKED:
                cancelled = self._cancel_tree([run_id], now)
            else:
                tree = self._subtree([run_id])
                Run.objects.filter(id__in=tree, status__in=ACTIVE).exclude(status=RunStatus.BLOCKED).update(
                    cancel_requested=True, updated_at=now
                )
                Run.objects.filter(id__in=tree, status=RunStatus.SUSPENDED).update(wake_at=now)
                cancelled = self._cancel_tree(
                    list(Run.objects.filter(id__in=tree, status=RunStatus.BLOCKED).values_list("id", flat=True)), now
                )
                woken = tree
        if cancelled:
            woken += self._wake_waiters([RUN_TOKEN + rid for rid in cancelled], now)
        return True, woken

    def notify_settled(self, run_id: str, now: datetime) -> list[str]:
        """Wake runs waiting on ``run_id`` (or on the run it retries) after it settled outside a turn."""
        retry_of = Run.objects.filter(id=run_id).values_list("retry_of", flat=True).first()
        tokens = [RUN_TOKEN + run_id] + ([RUN_TOKEN + retry_of] if retry_of else [])
        return self._wake_waiters(tokens, now)

    def wake(self, run_ids: list[str], now: datetime) -> None:
        if run_ids:
            Run.objects.filter(id__in=run_ids, status=RunStatus.SUSPENDED).update(wake_at=now)

    def requeue(self, run_id: str, now: datetime, deadline_at: datetime | None) -> list[str]:
        """Put a failed or dead run back to ``pending`` so it really runs again.

        History from the first failed step or child onwards is dropped
        (everything after it was decided by that failure), so replay executes
        it afresh instead of replaying its failure. Completed checkpoints before
        it, including a late success that landed after the run failed, are
        kept. Failed children it awaited are requeued too, recursively. The
        recovery count starts again from zero. Returns the ids requeued.
        """
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in (RunStatus.FAILED, RunStatus.DEAD):
                raise InvalidRunState(f"run {run_id!r} is {status}; only failed or dead runs can be requeued")
            return self._requeue(run_id, now, {"deadline_at": deadline_at})

    def _requeue(self, run_id: str, now: datetime, extra: dict[str, Any]) -> list[str]:
        failed = Checkpoint.objects.filter(run_id=run_id, status=CP_STATUS.FAILED, kind__in=RESETTABLE)
        first_failed = failed.aggregate(m=Min("seq"))["m"]
        requeued = [run_id]
        if first_failed is not None:
            dropped = Checkpoint.objects.filter(run_id=run_id, seq__gte=first_failed)
            children = [
                (row or {}).get("run_id")
                for row in dropped.filter(kind="child", status=CP_STATUS.FAILED).values_list("input", flat=True)
            ]
            dropped.delete()
            for child_id in children:
                if child_id and Run.objects.filter(id=child_id, status__in=(RunStatus.FAILED, RunStatus.DEAD)).exists():
                    requeued += self._requeue(child_id, now, {})
        Run.objects.filter(id=run_id, status__in=(RunStatus.FAILED, RunStatus.DEAD)).update(
            status=RunStatus.PENDING,
            error=None,
            output=None,
            finished_at=None,
            wake_at=None,
            locked_by=None,
            locked_until=None,
            recovery_attempts=0,
            cancel_requested=False,
            updated_at=now,
            **extra,
        )
        return requeued

    def pending_steps(self, run_id: str, now: datetime, new_wake: datetime) -> list[tuple[int, str | None]]:
        """Mark every pending dispatched step of an active run for re-dispatch; return them."""
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in ACTIVE:
                raise InvalidRunState(f"run {run_id!r} is {status}; its steps are not dispatched any more")
            pending = Checkpoint.objects.filter(run_id=run_id, kind="step", status=CP_STATUS.PENDING)
            rows = list(pending.values_list("seq", "queue"))
            pending.update(wake_at=new_wake, retry_at=None, dispatches=F("dispatches") + 1)
        return rows

    def resolve_run(self, run_id: str) -> RunRecord | None:
        """The run whose outcome stands for ``run_id``.

        Follows continue-as-new to the chain's latest run; for a failed or dead
        run, a completed retry-with-input of it stands in for it.
        """
        row = Run.objects.filter(id=run_id).first()
        seen: set[str] = set()
        while row is not None and row.continued_to and row.continued_to not in seen:
            seen.add(row.id)
            row = Run.objects.filter(id=row.continued_to).first()
        if row is not None and row.status in (RunStatus.FAILED, RunStatus.DEAD):
            retry = Run.objects.filter(retry_of=row.id, status=RunStatus.COMPLETED).order_by("-finished_at").first()
            if retry is not None:
                return self.resolve_run(retry.id)
        return _run_record(row) if row is not None else None

    def list_runs(
        self,
        *,
        statuses: list[str],
        workflow: str | None,
        namespace: str | None,
        tag: str | None,
        attributes: list[tuple[str, str, Any]],
        created_after: datetime | None,
        created_before: datetime | None,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        qs = self.runs_queryset(
            statuses=statuses, workflow=workflow, namespace=namespace, tag=tag, attributes=attributes
        )
        if created_after is not None:
            qs = qs.filter(created_at__gte=created_after)
        if created_before is not None:
            qs = qs.filter(created_at__lt=created_before)
        if after is not None:
            qs = qs.filter(Q(created_at__lt=after[0]) | Q(created_at=after[0], id__lt=after[1]))
        return [_run_record(row) for row in qs.order_by("-created_at", "-id")[:limit]]

    def runs_queryset(
        self,
        *,
        statuses: list[str] | None = None,
        workflow: str | None = None,
        namespace: str | None = None,
        tag: str | None = None,
        attributes: list[tuple[str, str, Any]] | None = None,
    ) -> Any:
        """Runs filtered as :func:`durable.list_runs` does (shared with the dashboard)."""
        qs = Run.objects.all()
        if statuses:
            qs = qs.filter(status__in=statuses)
        if workflow:
            qs = qs.filter(workflow=workflow)
        if namespace:
            qs = qs.filter(namespace=namespace)
        if tag:
            if connection.vendor == "postgresql":
                qs = qs.filter(tags__contains=[tag])
            else:
                qs = qs.extra(
                    where=["EXISTS (SELECT 1 FROM json_each(durable_run.tags) WHERE value = %s)"], params=[tag]
                )
        for key, op, value in attributes or []:
            path = f"search_attributes__{key}"
            qs = qs.filter(**{"search_attributes__has_key": key})
            if op == "eq":
                qs = qs.filter(**{path: value})
            elif op == "ne":
                qs = qs.exclude(**{path: value})
            else:
                qs = qs.filter(**{f"{path}__{op}": value})
        return qs
