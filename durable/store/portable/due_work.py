"""Due work as the sweeps find it: due runs and page claims, orphans, overdue runs, lost and expired steps."""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Min, Q, QuerySet

from durable.engine.ports import RunRecord
from durable.engine.vocab import ACTIVE, UNSETTLED, Admission, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Run, SignalWaiter
from durable.store.claim_statements import claim_page_params, claim_page_sql
from durable.store.portable.shared import StoreBase, run_record, ts

Namespaces = Collection[str] | None


def scoped_runs(namespaces: Namespaces) -> QuerySet[Run]:
    """The runs a worker scoped to ``namespaces`` takes (None: every run)."""
    runs = Run.objects.all()
    return runs if namespaces is None else runs.filter(namespace__in=list(namespaces))


class DueWork(StoreBase):
    def due_runs(self, now: datetime, limit: int, *, namespaces: Namespaces = None) -> list[str]:
        runs = scoped_runs(namespaces)
        pending = list(
            runs.filter(status=RunStatus.PENDING)
            .order_by("-priority", "created_at")
            .values_list("id", flat=True)[:limit]
        )
        suspended = list(
            runs.filter(status=RunStatus.SUSPENDED, wake_at__lte=now)
            .order_by("wake_at")
            .values_list("id", flat=True)[: max(limit - len(pending), 0)]
        )
        return pending + suspended

    def claim_due_runs(
        self, owner: str, now: datetime, lease_until: datetime, limit: int, *, namespaces: Namespaces = None
    ) -> list[RunRecord]:
        """Take the leases of up to ``limit`` due runs at once; return them as they now are.

        Pending runs first (highest priority, oldest), then suspended runs whose
        wake is due (earliest first), exactly as :meth:`due_runs` orders them.
        Each claim is the same compare-and-set as ``acquire`` (status ``running``,
        ``locked_by``, ``locked_until``, ``updated_at``, ``started_at`` if unset,
        ``turns + 1``), made for a whole page in one statement. On PostgreSQL
        the page is chosen ``FOR UPDATE SKIP LOCKED``, so concurrent claimers
        take disjoint runs without waiting for each other; SQLite serialises
        writers, so there the one statement is atomic as it is. With
        ``namespaces`` (a scoped worker) only runs of those namespaces are
        chosen: the others are never leased, not even briefly.
        """
        scope = sorted(namespaces) if namespaces is not None else None
        with self._claiming():
            claimed = self._claim(owner, now, lease_until, limit, pending=True, scope=scope)
            if len(claimed) < limit:
                claimed += self._claim(owner, now, lease_until, limit - len(claimed), pending=False, scope=scope)
        return claimed

    def _claiming(self) -> AbstractContextManager[None]:
        """What a page claim's statements run in (PostgreSQL: :meth:`Cursors.by_index`); here nothing."""
        return nullcontext()

    def _claim(
        self, owner: str, now: datetime, lease_until: datetime, limit: int, *, pending: bool, scope: list[str] | None
    ) -> list[RunRecord]:
        if scope == []:
            return []  # scoped to no namespace: nothing to take
        runs = self._claim_page(owner, now, lease_until, limit, pending=pending, scope=scope)
        # RETURNING gives no order: put the page back in the order it was chosen in.
        if pending:
            runs.sort(key=lambda run: (-run.priority, run.created_at))
        else:
            runs.sort(key=lambda run: (run.wake_at is None, run.wake_at))
        return runs

    def _claim_page(
        self, owner: str, now: datetime, lease_until: datetime, limit: int, *, pending: bool, scope: list[str] | None
    ) -> list[RunRecord]:
        """One statement that leases a page of due runs (SQLite serialises writers: it is atomic as it is)."""
        due = [RunStatus.PENDING] if pending else [RunStatus.SUSPENDED, ts(now)]
        params = claim_page_params(due, limit, owner, ts(now), ts(lease_until), scope or ())
        sql = claim_page_sql(pending, len(scope or ()))
        return [run_record(row) for row in Run.objects.raw(sql, params)]

    def due_steps(
        self, now: datetime, limit: int, *, namespaces: Namespaces = None
    ) -> list[tuple[str, int, str | None]]:
        """Pending dispatched steps that may be claimed now (fresh, or retry due), of runs of
        ``namespaces`` (None: of every namespace)."""
        steps = Checkpoint.objects.all()
        if namespaces is not None:
            steps = steps.filter(run__namespace__in=list(namespaces))
        rows = (
            steps.filter(kind=CheckpointKind.STEP, status=CheckpointStatus.PENDING, run__status__in=ACTIVE)
            .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
            # A limited queue's step only once admitted and its granted start reached.
            .filter(Q(admission__isnull=True) | Q(admission=Admission.ADMITTED, admitted_at__lte=now, wake_at__gt=now))
            .order_by("enqueued_at")
            .values_list("run_id", "seq", "queue")[:limit]
        )
        return list(rows)

    def orphans(self, now: datetime, limit: int, *, namespaces: Namespaces = None) -> list[str]:
        runs = scoped_runs(namespaces).filter(status=RunStatus.RUNNING, locked_until__lt=now)
        return list(runs.values_list("id", flat=True)[:limit])

    def recover_orphan(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        dead_lifecycle: Callable[[str], dict[str, Any] | None] = lambda workflow: None,
    ) -> RunRecord | str | None:
        """Take an expired lease and decide on the run as re-read under it.

        Returns the run (lease held, recovery counted) to run a turn on,
        ``"dead"`` when it exceeded ``max_attempts``, or None when it was not an
        orphan after all (lease renewed, run moved on, or a concurrent cancel).
        """
        taken = Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_until__lt=now).update(
            locked_by=owner, locked_until=lease_until
        )
        if not taken:
            return None
        row = Run.objects.filter(id=run_id).first()
        if row is None or row.status != RunStatus.RUNNING or row.locked_by != owner:
            return None
        attempts = row.recovery_attempts + 1
        mine = Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner)
        if attempts > max_attempts:
            error = {
                "message": f"run was orphaned {attempts} times (limit {max_attempts}); giving up",
                "code": "max_recovery_attempts",
                "retryable": False,
                "type": "Dead",
                "traceback": None,
            }
            lifecycle = dead_lifecycle(row.workflow)
            dead = mine.update(
                status=RunStatus.DEAD,
                error=error,
                lifecycle=lifecycle or {},
                lifecycle_owed=bool(lifecycle),
                recovery_attempts=attempts,
                finished_at=now,
                updated_at=now,
                locked_by=None,
                locked_until=None,
            )
            return "dead" if dead else None
        if not mine.update(recovery_attempts=attempts, turns=F("turns") + 1, updated_at=now):
            return None
        row.recovery_attempts = attempts
        row.turns += 1
        return run_record(row)

    def overdue_runs(self, now: datetime, limit: int) -> list[str]:
        return list(
            Run.objects.filter(deadline_at__lt=now, status__in=ACTIVE, cancel_requested=False).values_list(
                "id", flat=True
            )[:limit]
        )

    def request_timeout(self, run_id: str, now: datetime, error: dict[str, Any]) -> bool:
        """Ask an overdue run to stop: its next turn undoes what it can and ends failed with ``error``."""
        with transaction.atomic():
            asked = Run.objects.filter(
                id=run_id,
                deadline_at__lt=now,
                status__in=(RunStatus.PENDING, RunStatus.SUSPENDED, RunStatus.RUNNING),
                cancel_requested=False,
            ).update(cancel_requested=True, error=error, updated_at=now)
            if asked:
                Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now)
        return bool(asked)

    def fail_overdue(
        self, run_id: str, now: datetime, error: dict[str, Any], lifecycle: dict[str, Any] | None = None
    ) -> bool:
        with transaction.atomic():
            failed = Run.objects.filter(id=run_id, deadline_at__lt=now, status__in=ACTIVE).update(
                status=RunStatus.FAILED,
                error=error,
                lifecycle=lifecycle or {},
                lifecycle_owed=bool(lifecycle),
                finished_at=now,
                updated_at=now,
                wake_at=None,
                locked_by=None,
                locked_until=None,
            )
            if failed:
                SignalWaiter.objects.filter(run_id=run_id).delete()
        return bool(failed)

    def expired_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]:
        """Running steps whose execution lease lapsed (worker gone) or whose timeout passed."""
        rows = (
            Checkpoint.objects.filter(kind=CheckpointKind.STEP, status=CheckpointStatus.RUNNING)
            .filter(Q(wake_at__lt=now) | Q(timeout_at__lt=now))
            .values("run_id", "seq", "name", "queue", "attempts", "locked_by", "wake_at", "timeout_at")[:limit]
        )
        return [dict(row) for row in rows]

    def lost_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]:
        """Pending dispatched steps that no worker took before their redelivery time."""
        rows = (
            Checkpoint.objects.filter(
                kind=CheckpointKind.STEP, status=CheckpointStatus.PENDING, wake_at__lte=now, run__status__in=ACTIVE
            )
            # A limited queue's steps are sent by their admission (a lapsed one is admitted again).
            .filter(admission__isnull=True)
            .order_by("wake_at")
            .values("run_id", "seq", "name", "queue", "dispatches", "wake_at", "retry_at")[:limit]
        )
        return [dict(row) for row in rows]

    def redispatch_step(self, run_id: str, seq: int, expected_wake: datetime | None, new_wake: datetime) -> bool:
        """Claim the right to re-dispatch a pending step (compare-and-set on its wake time)."""
        cp = Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CheckpointStatus.PENDING, wake_at=expected_wake)
        return bool(cp.update(wake_at=new_wake, dispatches=F("dispatches") + 1))

    def blocked_runs(self, limit: int) -> list[dict[str, Any]]:
        rows = Run.objects.filter(status=RunStatus.BLOCKED).values("id", "workflow", "version", "error")[:limit]
        return [dict(row) for row in rows]

    def next_wake(self) -> datetime | None:
        """The earliest wake time of a suspended run (the worker loop sleeps no longer than that)."""
        wake: datetime | None = Run.objects.filter(status=RunStatus.SUSPENDED).aggregate(m=Min("wake_at"))["m"]
        return wake

    def next_due(self) -> datetime | None:
        """The earliest moment at which some work falls due (for test drivers)."""
        run_wake = Run.objects.filter(status=RunStatus.SUSPENDED).aggregate(m=Min("wake_at"))["m"]
        step_wake = Checkpoint.objects.filter(
            kind=CheckpointKind.STEP,
            status__in=UNSETTLED,
            wake_at__isnull=False,
        ).aggregate(m=Min("wake_at"))["m"]
        candidates = [d for d in (run_wake, step_wake) if d is not None]
        return min(candidates) if candidates else None
