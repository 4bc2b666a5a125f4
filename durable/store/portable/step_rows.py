"""Dispatched steps: claim, heartbeat and settle under compare-and-set, executed from their plans."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Q, Value, When

from durable.engine.plan_queues import AdmissionRead, claimable
from durable.engine.plan_steps import StepClaimPlan, StepResultPlan, plan_step_claim, plan_step_lapse, plan_step_result
from durable.engine.ports import ClaimCheck, RunRecord, StepClaim
from durable.engine.vocab import SETTLED, Admission, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Run
from durable.store.portable.shared import StoreBase, claimed

# What a claim of a limited queue's step checks (plan_queues.claimable).
_ADMISSION = ("admission", "admitted_at", "wake_at")


def readmit(plan: StepResultPlan) -> dict[str, Any]:
    """A retry's columns: a step of a limited queue gives its slot back and waits to be admitted again."""
    if not plan.retry:
        return dict(plan.sets)
    back = Case(When(admission__isnull=False, then=Value(Admission.WAITING.value)), default=Value(None))
    return {**plan.sets, "admission": back}


class StepRows(StoreBase):
    # Provided by RunRows: the store is one class made of these parts.
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
        """Claim a pending, due step of an active run (see :class:`durable.engine.plan_steps.StepClaimPlan`)."""
        return self._claim_step(plan_step_claim(run_id, seq, owner, now, lease_until), timeout_of)

    def _claim_step(self, plan: StepClaimPlan, timeout_of: Callable[[str], float | None]) -> StepClaim | None:
        with transaction.atomic():
            # Lock the checkpoint row only (no join to the run for ordering): the run row is
            # locked first everywhere else, and this must not take it in the other order.
            row = (
                Checkpoint.objects.select_for_update(of=("self",))
                .filter(run_id=plan.run_id, seq=plan.seq, kind=plan.kind)
                .order_by()
                .values("id", "name", "status", "input", "attempts", "retry_at", "queue", "enqueued_at", *_ADMISSION)
                .first()
            )
            if row is None or row["status"] != plan.expect:
                return None
            if not claimable(row["admission"], row["admitted_at"], row["wake_at"], plan.now):
                return None  # a step of a limited queue not admitted (or no longer)
            if row["retry_at"] is not None and row["retry_at"] > plan.now:
                return None  # a retry that is not due yet
            run = (
                Run.objects.filter(id=plan.run_id)
                .values_list("status", "namespace", "workflow", "trace_context")
                .first()
            )
            if run is None or run[0] not in plan.run_statuses:
                return None
            sets = {**plan.sets, "timeout_at": plan.timeout_at(timeout_of(row["name"]))}
            Checkpoint.objects.filter(id=row["id"]).update(attempts=F("attempts") + 1, **sets)
        ready_at = row["retry_at"] or row["enqueued_at"]
        return StepClaim(
            plan.run_id,
            plan.seq,
            row["name"],
            row["input"],
            row["attempts"] + 1,
            run[1],
            row["queue"],
            ready_at,
            run[2],
            run[3],
        )

    def renew_step(self, run_id: str, seq: int, owner: str, lease_until: datetime) -> bool:
        return bool(
            Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CheckpointStatus.RUNNING, locked_by=owner).update(
                wake_at=lease_until
            )
        )

    def heartbeat_step(self, run_id: str, seq: int, now: datetime, progress: Any, lease_until: datetime) -> None:
        """Record liveness and progress; push the execution lease out once half of it is spent."""
        running = Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CheckpointStatus.RUNNING)
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
        claim: ClaimCheck | None = None,
        admission: AdmissionRead | None = None,
    ) -> bool:
        """Settle (or schedule the retry of) a dispatched step; wake its run.

        Returns True when the run was woken and should take its next turn.
        A duplicate result finds the checkpoint settled, changes nothing, and
        still wakes the run so a resume lost after the first result is re-driven.
        With ``claim`` (a worker's result for the attempt it claimed) the
        result is refused, nothing written, once that attempt is no longer the
        checkpoint's: a sweep counted it lost (:meth:`lapse_step`) or a later
        claim holds the step.
        """
        plan = plan_step_result(run_id, seq, now, output=output, error=error, retry_at=retry_at, claim=claim)
        return self._finish_step(plan)

    def _finish_step(self, plan: StepResultPlan) -> bool:
        """Execute a step result's plan (run row locked first, then the checkpoint); True if woken."""
        with transaction.atomic():
            found = Run.objects.select_for_update().filter(id=plan.run_id).values_list("status", "awaiting_steps")
            status, awaiting = found.first() or (None, None)
            if status is None or status in plan.ignored_runs:
                return False
            settled = self._settle_checkpoint(plan)
            if not plan.wake or status != RunStatus.SUSPENDED:
                return False
            wakes, left = plan.counted(awaiting, settled)
            run = Run.objects.filter(id=plan.run_id, status=RunStatus.SUSPENDED)
            if not wakes:
                run.update(awaiting_steps=left)
                return False
            return bool(run.update(wake_at=plan.now, awaiting_steps=left))

    @staticmethod
    def _settle_checkpoint(plan: StepResultPlan) -> bool:
        """Write the plan's checkpoint columns where its conditions hold; True if written."""
        cps = Checkpoint.objects.filter(run_id=plan.run_id, seq=plan.seq, status__in=plan.open)
        if plan.claim is not None:
            cps = cps.filter(claimed(plan.claim))
        return bool(cps.update(**readmit(plan)))

    def lapse_step(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        claim: ClaimCheck,
        error: dict[str, Any],
        retry_at: datetime | None = None,
    ) -> bool:
        """End a running attempt that ran out (its execution lease or its timeout) as a failed attempt.

        Retried at ``retry_at`` (pending again, same step id) or, without it,
        failed with ``error``, waking a suspended run. Compare-and-set on the
        claim (:class:`~durable.engine.ports.ClaimCheck`: still running under
        ``claim``, and run out at ``now``): of sweepers racing on the same
        attempt exactly one writes, and the late result of the attempt's
        worker is refused afterwards. True when this call wrote it.
        """
        plan = plan_step_lapse(run_id, seq, now, claim, error, retry_at)
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None or not self._settle_checkpoint(plan):
                return False
            if plan.wake and status == RunStatus.SUSPENDED:
                Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now)
        return True

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
        claim: ClaimCheck | None = None,
        admission: AdmissionRead | None = None,
    ) -> RunRecord | None:
        """:meth:`finish_step`, then take the woken run's lease for ``owner`` (its next turn).

        Returns the run, leased, when it was suspended (the caller runs its
        turn); None when it was not woken (still running elsewhere, blocked,
        over).
        """
        if not self.finish_step(run_id, seq, now, output=output, error=error, claim=claim):
            return None
        return self.acquire(run_id, owner, now, lease_until)

    def poke_if_settled(self, run_id: str, seq: int, now: datetime) -> bool:
        """Wake the run for a step found settled (a re-delivery whose resume may have been lost).

        Not while the run still counts steps it waits on: its last result wakes it.
        """
        if not Checkpoint.objects.filter(run_id=run_id, seq=seq, status__in=SETTLED).exists():
            return False
        counted_out = Q(awaiting_steps__isnull=True) | Q(awaiting_steps__lte=0)
        return bool(Run.objects.filter(counted_out, id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now))

    def poke(self, run_id: str, now: datetime) -> bool:
        return bool(Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now))
