"""Dispatched steps: claim, heartbeat and settle under compare-and-set."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

from durable.engine.ports import (
    RunRecord,
    StepClaim,
)
from durable.models import (
    ACTIVE,
    Checkpoint,
    Run,
    RunStatus,
)
from durable.store import _pg
from durable.store._base import (
    CP_STATUS,
    StoreBase,
)


class StepsStore(StoreBase):
    # Provided by RunsStore: the store is one class made of these parts.
    acquire: Callable[[str, str, datetime, datetime], RunRecord | None]

    def claim_step(
        self,
        run_id: str,
        seq: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
        timeout_of: Callable[[str], float | None] = lambda name: None,
    ) -> StepClaim | None:
        if _pg.usable():
            got = _pg.claim_step(run_id, seq, owner, now, lease_until)
            if got is None:
                return None
            cp_id, name, value, attempts, namespace = got
            timeout = timeout_of(name)
            if timeout:
                _pg.set_step_timeout(cp_id, now + timedelta(seconds=timeout))
            return StepClaim(run_id, seq, name, value, attempts, namespace)
        with transaction.atomic():
            # Lock the checkpoint row only (no join to the run for ordering): the run row is
            # locked first everywhere else, and this must not take it in the other order.
            row = (
                Checkpoint.objects.select_for_update(of=("self",))
                .filter(run_id=run_id, seq=seq, kind="step")
                .order_by()
                .values("id", "name", "status", "input", "attempts", "retry_at")
                .first()
            )
            if row is None or row["status"] != CP_STATUS.PENDING:
                return None
            if row["retry_at"] is not None and row["retry_at"] > now:
                return None  # a retry that is not due yet
            run = Run.objects.filter(id=run_id).values_list("status", "namespace").first()
            if run is None or run[0] not in ACTIVE:
                return None
            timeout = timeout_of(row["name"])
            Checkpoint.objects.filter(id=row["id"]).update(
                status=CP_STATUS.RUNNING,
                attempts=F("attempts") + 1,
                locked_by=owner,
                wake_at=lease_until,
                dispatches=0,
                started_at=now,
                timeout_at=now + timedelta(seconds=timeout) if timeout else None,
            )
        return StepClaim(run_id, seq, row["name"], row["input"], row["attempts"] + 1, run[1])

    def renew_step(self, run_id: str, seq: int, owner: str, lease_until: datetime) -> bool:
        return bool(
            Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CP_STATUS.RUNNING, locked_by=owner).update(
                wake_at=lease_until
            )
        )

    def heartbeat_step(self, run_id: str, seq: int, now: datetime, progress: Any, lease_until: datetime) -> None:
        """Record liveness and progress; push the execution lease out once half of it is spent."""
        running = Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CP_STATUS.RUNNING)
        running.update(heartbeat_at=now, progress=progress)
        half = now + (lease_until - now) / 2
        running.filter(wake_at__lt=half).update(wake_at=lease_until)

    def finish_step(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
        retry_at: datetime | None = None,
    ) -> bool:
        """Settle (or schedule the retry of) a dispatched step; wake its run.

        Returns True when the run was woken and should take its next turn.
        A duplicate result finds the checkpoint settled, changes nothing, and
        still wakes the run so a resume lost after the first result is re-driven.
        """
        if retry_at is None and _pg.usable():
            status, _ = _pg.finish_step(run_id, seq, now, output, error, None)
            return status == RunStatus.SUSPENDED
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None or status in (RunStatus.CANCELLED, RunStatus.COMPLETED):
                return False
            open_cp = Checkpoint.objects.filter(
                run_id=run_id, seq=seq, status__in=(CP_STATUS.PENDING, CP_STATUS.RUNNING)
            )
            if retry_at is not None:
                open_cp.update(
                    status=CP_STATUS.PENDING, error=error, retry_at=retry_at, wake_at=retry_at, locked_by=None
                )
                return False
            if error is not None:
                open_cp.update(status=CP_STATUS.FAILED, error=error, wake_at=None, finished_at=now, locked_by=None)
            else:
                open_cp.update(
                    status=CP_STATUS.COMPLETED, output=output, error=None, wake_at=None, finished_at=now, locked_by=None
                )
            if status != RunStatus.SUSPENDED:
                return False
            return bool(Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now))

    def finish_step_and_acquire(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        owner: str,
        lease_until: datetime,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> RunRecord | None:
        """:meth:`finish_step`, then take the woken run's lease for ``owner`` (its next turn).

        Returns the run, leased, when it was suspended (the caller runs its
        turn); None when it was not woken (still running elsewhere, blocked,
        over). On PostgreSQL both happen in the one statement that settles
        the step.
        """
        if _pg.usable():
            _, run = _pg.finish_step(run_id, seq, now, output, error, (owner, lease_until))
            return run
        if not self.finish_step(run_id, seq, now, output=output, error=error):
            return None
        return self.acquire(run_id, owner, now, lease_until)

    def poke_if_settled(self, run_id: str, seq: int, now: datetime) -> bool:
        settled = Checkpoint.objects.filter(
            run_id=run_id, seq=seq, status__in=(CP_STATUS.COMPLETED, CP_STATUS.FAILED)
        ).exists()
        return settled and self.poke(run_id, now)

    def poke(self, run_id: str, now: datetime) -> bool:
        return bool(Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now))
