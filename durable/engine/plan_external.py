"""Plans of the writes made from outside a run: completing a callback, resuming a breakpoint.

Pure (no Django, no store). Each store executes a plan under the run's row
lock, in one transaction, and refuses it with the error :func:`callback_refusal`
or :func:`breakpoint_refusal` gives for what it found under that lock, so
every store refuses the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable.engine.ports import CheckpointRecord
from durable.engine.vocab import ACTIVE, CALLBACK_TOKEN, SETTLED, TERMINAL, CheckpointKind, CheckpointStatus
from durable.exceptions import BreakpointNotFound, CallbackAlreadyCompleted, CallbackNotFound, DurableError, RunNotFound


@dataclass(frozen=True)
class CallbackPlan:
    """Settle the pending callback at ``seq`` of ``run_id`` and buffer ``envelope`` as signal ``signal``.

    Compare-and-set: the checkpoint must still be a pending ``callback`` whose
    deadline has not passed, on a run still active; the buffered signal wakes
    the run if it waits on it (as :func:`durable.signal` does).
    """

    run_id: str
    seq: int
    signal: str
    envelope: dict[str, Any]
    status: CheckpointStatus
    output: Any
    error: dict[str, Any] | None
    now: datetime


def plan_callback(
    run_id: str, seq: int, token: str, now: datetime, *, payload: Any = None, error: dict[str, Any] | None = None
) -> CallbackPlan:
    """A completion (``error`` None) or a failure of the callback ``token`` names."""
    if error is None:
        return CallbackPlan(
            run_id, seq, CALLBACK_TOKEN + token, {"payload": payload}, CheckpointStatus.COMPLETED, payload, None, now
        )
    return CallbackPlan(
        run_id, seq, CALLBACK_TOKEN + token, {"error": error}, CheckpointStatus.FAILED, None, error, now
    )


def callback_refusal(plan: CallbackPlan, run_status: str | None, cp: CheckpointRecord | None) -> DurableError | None:
    """Why ``plan`` must not be written, given the run's status and the checkpoint at its position; None: write it."""
    where = f"callback #{plan.seq} of run {plan.run_id!r}"
    if run_status is None:
        return CallbackNotFound(f"{where}: no such run (it may have been deleted)")
    if cp is None or cp.kind != CheckpointKind.CALLBACK:
        return CallbackNotFound(f"{where}: the run has no callback at that position")
    if cp.status in SETTLED:
        done = "completed" if cp.status == CheckpointStatus.COMPLETED else "failed"
        return CallbackAlreadyCompleted(f"{where} ({cp.name!r}) was already {done}; nothing was written")
    if run_status in TERMINAL:
        return CallbackAlreadyCompleted(f"{where} ({cp.name!r}) is too late: the run has ended ({run_status})")
    if cp.wake_at is not None and cp.wake_at <= plan.now:
        return CallbackAlreadyCompleted(
            f"{where} ({cp.name!r}) is too late: it timed out at {cp.wake_at.isoformat()}; nothing was written"
        )
    return None


@dataclass(frozen=True)
class BreakpointPlan:
    """Settle the pending breakpoint of ``run_id`` (its newest) and wake the run if it is suspended."""

    run_id: str
    now: datetime


def breakpoint_refusal(run_id: str, run_status: str | None, paused: CheckpointRecord | None) -> DurableError | None:
    """Why a resume must not be written: no such run, or not paused at a breakpoint; None: write it."""
    if run_status is None:
        return RunNotFound(f"no run with id {run_id!r}")
    if paused is None or run_status not in ACTIVE:
        return BreakpointNotFound(f"run {run_id!r} is not paused at a breakpoint (it is {run_status})")
    return None


def paused_at(history: dict[int, CheckpointRecord]) -> CheckpointRecord | None:
    """The breakpoint a run is paused at: its newest pending ``breakpoint`` checkpoint, if any."""
    pending = [
        cp for cp in history.values() if cp.kind == CheckpointKind.BREAKPOINT and cp.status == CheckpointStatus.PENDING
    ]
    return max(pending, key=lambda cp: cp.seq, default=None)
