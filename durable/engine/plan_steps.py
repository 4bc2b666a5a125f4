"""The write plans of dispatched steps: a claim, a result (or retry), a lapse, and a worker's lease expiry.

Pure and frozen, like :mod:`durable.engine.plan` (the turn's commit plans):
each store executes these in its own way (one statement on PostgreSQL, the
ORM elsewhere, dictionaries in memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from durable.engine.ports import ClaimCheck
from durable.engine.vocab import ACTIVE, UNSETTLED, CheckpointKind, CheckpointStatus, RunStatus

# Runs whose step results are dropped (a failed run keeps a late result for a later requeue).
STEP_RESULT_IGNORED: tuple[RunStatus, ...] = (RunStatus.CANCELLED, RunStatus.COMPLETED)


@dataclass(frozen=True)
class StepClaimPlan:
    """Claim checkpoint ``seq`` for ``owner``: a pending, due step of an active run.

    Conditions: the checkpoint's kind is ``step`` and its status ``pending``,
    its retry (if any) is due at ``now``, and the run's status is one of
    ``run_statuses``. Only the checkpoint row is locked (the run row is read):
    a cancel racing the claim is settled by the result write. ``sets`` are
    written, with the attempts counted up by one; the step's timeout, known
    from its name once claimed, is :meth:`timeout_at`.
    """

    run_id: str
    seq: int
    owner: str
    now: datetime
    lease_until: datetime
    kind: CheckpointKind = CheckpointKind.STEP
    expect: CheckpointStatus = CheckpointStatus.PENDING
    run_statuses: tuple[RunStatus, ...] = ACTIVE

    @property
    def sets(self) -> dict[str, Any]:
        return {
            "status": CheckpointStatus.RUNNING,
            "locked_by": self.owner,
            "wake_at": self.lease_until,
            "dispatches": 0,
            "started_at": self.now,
            "timeout_at": None,
        }

    def timeout_at(self, seconds: float | None) -> datetime | None:
        return self.now + timedelta(seconds=seconds) if seconds else None


def plan_step_claim(run_id: str, seq: int, owner: str, now: datetime, lease_until: datetime) -> StepClaimPlan:
    return StepClaimPlan(run_id, seq, owner, now, lease_until)


@dataclass(frozen=True)
class StepResultPlan:
    """Settle (or schedule the retry of) checkpoint ``seq`` and wake its run.

    The run row is locked first, then the checkpoint. Nothing is written for
    a missing run or one in ``ignored_runs``; only a checkpoint whose status
    is in ``open`` (and, with ``claim``, that still belongs to that claim)
    takes ``sets``. ``wake``: a suspended run is woken (its wake set to
    ``now``), or with ``take=(owner, lease_until)`` leased to ``owner`` at
    once for its next turn. A retry wakes nothing.
    """

    run_id: str
    seq: int
    now: datetime
    sets: Mapping[str, Any]
    wake: bool
    take: tuple[str, datetime] | None = None
    open: tuple[CheckpointStatus, ...] = UNSETTLED
    ignored_runs: tuple[RunStatus, ...] = STEP_RESULT_IGNORED
    claim: ClaimCheck | None = None

    @property
    def retry(self) -> bool:
        return not self.wake

    def counted(self, awaiting: int | None, settled: bool) -> tuple[bool, int | None]:
        """Whether this result wakes a suspended run that waits on ``awaiting`` steps, and the count left.

        ``settled``: this result settled its checkpoint (a duplicate did not).
        ``awaiting`` None (the suspension does not know its steps): every
        result wakes. Otherwise the run wakes once none is left, or at a
        failure (a fail-fast gather must see it). Read under the run's lock,
        as the PostgreSQL statement reads its row as locked.
        """
        left = None if awaiting is None else awaiting - int(settled)
        failure = self.sets.get("status") != CheckpointStatus.COMPLETED
        return (self.wake and (counted_out(left) or failure)), left


def counted_out(awaiting: int | None) -> bool:
    """May anything wake a run that waits on ``awaiting`` steps? Yes unless it still counts some out.

    ``None``: the suspension does not count its steps, so every result may wake it.
    """
    return awaiting is None or awaiting <= 0


def plan_step_result(
    run_id: str,
    seq: int,
    now: datetime,
    *,
    output: Any = None,
    error: dict[str, Any] | None = None,
    retry_at: datetime | None = None,
    take: tuple[str, datetime] | None = None,
    claim: ClaimCheck | None = None,
) -> StepResultPlan:
    """The plan of ``Store.finish_step`` (and, with ``take``, ``finish_step_and_acquire``).

    With ``claim`` the result is that claim's: refused (nothing written, the
    run still woken) unless the checkpoint is still running under it.
    """
    if retry_at is not None:
        sets: dict[str, Any] = {
            "status": CheckpointStatus.PENDING,
            "error": error,
            "retry_at": retry_at,
            "wake_at": retry_at,
            "locked_by": None,
        }
        return StepResultPlan(run_id, seq, now, sets, wake=False, claim=claim)
    status = CheckpointStatus.FAILED if error is not None else CheckpointStatus.COMPLETED
    sets = {
        "status": status,
        "output": output if error is None else None,
        "error": error,
        "wake_at": None,
        "finished_at": now,
        "locked_by": None,
    }
    return StepResultPlan(run_id, seq, now, sets, wake=True, take=take, claim=claim)


def plan_step_lapse(
    run_id: str, seq: int, now: datetime, claim: ClaimCheck, error: dict[str, Any], retry_at: datetime | None
) -> StepResultPlan:
    """The plan of ``Store.lapse_step``: an attempt that ran out (lease or timeout) ends as a failure.

    Retried at ``retry_at`` or, without one, failed with ``error``. Written
    only while the checkpoint still belongs to ``claim`` and has run out at
    ``now``; the checkpoint keeps its history whatever its run's status.
    """
    claim = ClaimCheck(claim.owner, claim.attempt, lapsed_at=now)
    plan = plan_step_result(run_id, seq, now, error=error, retry_at=retry_at, claim=claim)
    return StepResultPlan(
        plan.run_id, plan.seq, now, plan.sets, plan.wake, open=(CheckpointStatus.RUNNING,), ignored_runs=(), claim=claim
    )


# An ended lease runs out this long before it is ended: a sweep at the same clock reading finds it lapsed.
LEASE_ENDED_BEFORE = timedelta(milliseconds=1)


@dataclass(frozen=True)
class LeaseExpiryPlan:
    """Every lease ``owner`` still holds runs out at ``until``: running runs' ``locked_until`` and running
    steps' ``wake_at`` (their execution lease), where later, under ``locked_by = owner`` (a lease taken
    over meanwhile is not touched). The orphan and lapsed-step sweeps then recover them by their own rules.
    """

    owner: str
    until: datetime
    run_status: RunStatus = RunStatus.RUNNING
    step_kind: CheckpointKind = CheckpointKind.STEP
    step_status: CheckpointStatus = CheckpointStatus.RUNNING


def plan_lease_expiry(owner: str, now: datetime) -> LeaseExpiryPlan:
    return LeaseExpiryPlan(owner, now - LEASE_ENDED_BEFORE)
