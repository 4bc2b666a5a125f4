"""Dispatched steps in memory: claim, heartbeat and settle under compare-and-set."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from durable.engine.plan_queues import AdmissionRead, claimable
from durable.engine.plan_steps import (
    StepResultPlan,
    counted_out,
    plan_step_claim,
    plan_step_lapse,
    plan_step_result,
)
from durable.engine.ports import ClaimCheck, RunRecord, StepClaim
from durable.engine.vocab import SETTLED, Admission, CheckpointStatus, RunStatus
from durable.store.memory.base import MemoryBase, atomically
from durable.store.memory.tables import CHECKPOINT_JSON, Row, as_json, run_record


class StepsPart(MemoryBase):
    # Provided by RunsPart: the store is one class made of these parts.
    _take: Callable[[Row, str, datetime, datetime], None]

    def _checkpoint(self, run_id: str, seq: int) -> Row | None:
        return self.tables.checkpoints.get(run_id, {}).get(seq)

    @atomically
    def claim_step(
        self,
        run_id: str,
        seq: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
        timeout_of: Callable[[str], float | None] = lambda name: None,
    ) -> StepClaim | None:
        """Claim a pending, due step of an active run for ``owner`` (one attempt counted).

        The plan's conditions (:func:`durable.engine.plan_steps.plan_step_claim`): a
        ``step`` checkpoint still ``pending``, its retry due, its run active.
        """
        plan = plan_step_claim(run_id, seq, owner, now, lease_until)
        cp = self._checkpoint(run_id, seq)
        if cp is None or cp["kind"] != plan.kind or cp["status"] != plan.expect:
            return None
        if cp["retry_at"] is not None and cp["retry_at"] > now:
            return None  # a retry that is not due yet
        if not claimable(cp["admission"], cp["admitted_at"], cp["wake_at"], now):
            return None  # a step of a limited queue not admitted (or no longer)
        run = self.tables.runs.get(run_id)
        if run is None or run["status"] not in plan.run_statuses:
            return None
        timeout_at = plan.timeout_at(timeout_of(cp["name"]))
        self.tables.set(cp, **{**plan.sets, "attempts": cp["attempts"] + 1, "timeout_at": timeout_at})
        ready_at = cp["retry_at"] or cp["enqueued_at"]
        return StepClaim(
            run_id,
            seq,
            cp["name"],
            as_json(cp["input"]),
            cp["attempts"],
            run["namespace"],
            cp["queue"],
            ready_at,
            run["workflow"],
            as_json(run["trace_context"]),
        )

    @atomically
    def renew_step(self, run_id: str, seq: int, owner: str, lease_until: datetime) -> bool:
        cp = self._checkpoint(run_id, seq)
        if cp is None or cp["status"] != CheckpointStatus.RUNNING or cp["locked_by"] != owner:
            return False
        self.tables.set(cp, wake_at=lease_until)
        return True

    @atomically
    def heartbeat_step(self, run_id: str, seq: int, now: datetime, progress: Any, lease_until: datetime) -> None:
        """Record liveness and progress; push the execution lease out once half of it is spent."""
        cp = self._checkpoint(run_id, seq)
        if cp is None or cp["status"] != CheckpointStatus.RUNNING:
            return
        self.tables.set(cp, heartbeat_at=now, progress=as_json(progress))
        half = now + (lease_until - now) / 2
        if cp["wake_at"] is not None and cp["wake_at"] < half:
            self.tables.set(cp, wake_at=lease_until)

    @atomically
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

        Returns True when the run was woken. Results for missing, cancelled or
        completed runs are dropped; a late result for a failed run is kept
        (for a requeue) without resuming it. A settled checkpoint is never
        changed, but a duplicate result still wakes a suspended run. With
        ``claim``, a result is refused once that attempt is no longer the
        checkpoint's (counted lost by a sweep, or claimed again).
        """
        plan = plan_step_result(run_id, seq, now, output=output, error=error, retry_at=retry_at, claim=claim)
        return self._execute_result(plan)

    def _execute_result(self, plan: StepResultPlan) -> bool:
        """Execute a step-result plan; True when the run was woken."""
        run = self.tables.runs.get(plan.run_id)
        if run is None or run["status"] in plan.ignored_runs:
            return False
        settled = self._settle_checkpoint(plan)
        if not plan.wake or run["status"] != RunStatus.SUSPENDED:
            return False
        wakes, left = plan.counted(run["awaiting_steps"], settled)
        self.tables.set(run, awaiting_steps=left)
        return wakes and bool(self._wake([plan.run_id], plan.now))

    def _settle_checkpoint(self, plan: StepResultPlan) -> bool:
        cp = self._checkpoint(plan.run_id, plan.seq)
        if cp is None or cp["status"] not in plan.open or (plan.claim is not None and not plan.claim.holds(cp)):
            return False
        self.tables.set(cp, **{k: as_json(v) if k in CHECKPOINT_JSON else v for k, v in plan.sets.items()})
        if plan.retry and cp["admission"] is not None:
            self.tables.set(cp, admission=Admission.WAITING)  # its slot is given back until admitted again
        return True

    @atomically
    def lapse_step(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        claim: ClaimCheck,
        error: dict[str, Any],
        retry_at: datetime | None = None,
    ) -> bool:
        """End an attempt that ran out as a failed one: retried at ``retry_at``, else failed with ``error``.

        Compare-and-set on ``claim`` (still running under it, run out at
        ``now``): of racing sweepers exactly one writes. True if this call did.
        """
        plan = plan_step_lapse(run_id, seq, now, claim, error, retry_at)
        if run_id not in self.tables.runs or not self._settle_checkpoint(plan):
            return False
        if plan.wake:
            self._wake([run_id], now)
        return True

    @atomically
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
        """:meth:`finish_step`, then the woken run leased to ``owner`` (its next turn), in one write.

        None when the run was not woken (running elsewhere, blocked, over).
        """
        if not self.finish_step(run_id, seq, now, output=output, error=error, claim=claim):
            return None
        row = self.tables.runs[run_id]
        self._take(row, owner, now, lease_until)
        return run_record(row)

    @atomically
    def poke_if_settled(self, run_id: str, seq: int, now: datetime) -> bool:
        cp = self._checkpoint(run_id, seq)
        if cp is None or cp["status"] not in SETTLED:
            return False
        # While the run still counts steps out, its last result wakes it.
        return counted_out(self.tables.runs[run_id]["awaiting_steps"]) and bool(self._wake([run_id], now))

    @atomically
    def poke(self, run_id: str, now: datetime) -> bool:
        return bool(self._wake([run_id], now))
