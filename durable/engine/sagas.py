"""Sagas: undo completed steps, newest first, when a run fails or is cancelled with undo.

Each undo is itself a durable operation at the next position of the run's
history, so a crash in the middle of compensating resumes where it stopped
and never undoes a step twice. An undo that still fails after its retries is
recorded in the report and skipped; the run's original error is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durable.engine.ports import CheckpointRecord, CheckpointWrite
from durable.engine.serialization import error_record, to_json

if TYPE_CHECKING:
    from durable.engine.context import WorkflowContext

# Retries of a local (in-process) undo function before it is recorded as failed and skipped.
LOCAL_UNDO_RETRIES = 2


@dataclass(frozen=True)
class Compensation:
    """How to undo the completed step at ``seq``: ``undo(input, output)``."""

    seq: int
    name: str
    undo: Any
    input: Any
    output: Any


def run_compensations(ctx: WorkflowContext) -> list[dict[str, Any]]:
    """Undo every registered compensation in reverse order; return what happened to each.

    May raise the internal Suspend while a dispatched undo is in flight; the
    next turn replays the workflow to the same failure and comes back here.
    """
    turn = ctx._turn
    turn.compensating = True
    report = []
    for comp in reversed(turn.compensations):
        step_def = getattr(comp.undo, "__durable_step__", None)
        if step_def is not None:
            report.append(_undo_dispatched(ctx, comp, step_def))
        else:
            report.append(_undo_local(ctx, comp))
    return report


def _undo_dispatched(ctx: WorkflowContext, comp: Compensation, sd: Any) -> dict[str, Any]:
    seq, cp = ctx._next(sd.name, "step")
    entry: dict[str, Any] = {"seq": comp.seq, "step": comp.name, "undo": sd.name}
    if cp is None:
        ctx._dispatch_step(seq, sd, (comp.input, comp.output), {})
        raise ctx._suspend(event=True)
    if cp.status == "completed":
        return {**entry, "status": "completed"}
    if cp.status == "failed":
        return {**entry, "status": "failed", "error": cp.error}
    raise ctx._suspend(event=True)


def _undo_local(ctx: WorkflowContext, comp: Compensation) -> dict[str, Any]:
    name = f"undo:{comp.name}"
    seq, cp = ctx._next(name, "compensation")
    entry: dict[str, Any] = {"seq": comp.seq, "step": comp.name, "undo": name}
    attempts = 0
    if cp is not None:
        if cp.status == "completed":
            return {**entry, "status": "completed"}
        if cp.status == "failed":
            return {**entry, "status": "failed", "error": cp.error}
        if cp.wake_at is not None and cp.wake_at > ctx._clock.now():
            raise ctx._suspend(cp.wake_at)
        attempts = cp.attempts
    turn = ctx._turn
    turn.flush()
    attempt = attempts + 1
    started = ctx._clock.now()
    try:
        value = to_json(comp.undo(comp.input, comp.output), f"result of {name!r}")
    except Exception as exc:  # noqa: BLE001 - a failing undo is recorded, never raised
        err = error_record(exc)
        if err["retryable"] and attempt <= LOCAL_UNDO_RETRIES:
            retry_at = ctx._clock.now() + timedelta(seconds=attempt)
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="compensation",
                status="pending",
                error=err,
                attempts=attempt,
                wake_at=retry_at,
                started_at=started,
            )
            turn.defer(CheckpointWrite(rec, create=cp is None, expect=("pending",)))
            turn.flush()
            raise ctx._suspend(retry_at) from None
        rec = CheckpointRecord(
            seq=seq,
            name=name,
            kind="compensation",
            status="failed",
            error=err,
            attempts=attempt,
            started_at=started,
            finished_at=ctx._clock.now(),
        )
        turn.defer(CheckpointWrite(rec, create=cp is None, expect=("pending",)))
        turn.flush()
        return {**entry, "status": "failed", "error": err}
    rec = CheckpointRecord(
        seq=seq,
        name=name,
        kind="compensation",
        status="completed",
        output=value,
        attempts=attempt,
        started_at=started,
        finished_at=ctx._clock.now(),
    )
    turn.defer(CheckpointWrite(rec, create=cp is None, expect=("pending",)))
    turn.flush()
    return {**entry, "status": "completed"}
