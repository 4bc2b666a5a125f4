"""Sagas: undo completed steps, newest first, when a run fails or is cancelled with undo.

Each undo is itself a durable operation at the next position of the run's
history, so a crash in the middle of compensating resumes where it stopped
and never undoes a step twice. An undo that still fails after its retries is
recorded in the report and skipped; the run's original error is kept.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from durable.engine.history import COMPLETED, FAILED
from durable.engine.ops.base import Compensation
from durable.engine.ops.steps import StepOps
from durable.engine.registry import StepDef
from durable.engine.serialization import error_record, to_json
from durable.engine.vocab import CheckpointKind

# Retries of a local (in-process) undo function before it is recorded as failed and skipped.
LOCAL_UNDO_RETRIES = 2
UNDO = CheckpointKind.COMPENSATION

__all__ = ["LOCAL_UNDO_RETRIES", "Compensation", "SagaOps"]


class SagaOps(StepOps):
    def _has_undo(self) -> bool:
        return bool(self._compensations)

    def _compensate(self) -> list[dict[str, Any]]:
        """Undo every registered compensation in reverse order; return what happened to each.

        May raise the internal Suspend while a dispatched undo is in flight; the
        next turn replays the workflow to the same failure and comes back here.
        """
        self._history.compensating = True
        report = []
        for comp in reversed(self._compensations):
            step_def = getattr(comp.undo, "__durable_step__", None)
            if step_def is not None:
                report.append(self._undo_dispatched(comp, step_def))
            else:
                report.append(self._undo_local(comp))
        return report

    def _undo_dispatched(self, comp: Compensation, sd: StepDef) -> dict[str, Any]:
        seq, cp = self._next(sd.name, CheckpointKind.STEP)
        entry: dict[str, Any] = {"seq": comp.seq, "step": comp.name, "undo": sd.name}
        if cp is None:
            self._dispatch_step(seq, sd, (comp.input, comp.output), {})
            raise self._suspend(event=True)
        if cp.status == COMPLETED:
            return {**entry, "status": COMPLETED}
        if cp.status == FAILED:
            return {**entry, "status": FAILED, "error": cp.error}
        raise self._suspend(event=True)

    def _undo_local(self, comp: Compensation) -> dict[str, Any]:
        name = f"undo:{comp.name}"
        seq, cp = self._next(name, UNDO)
        entry: dict[str, Any] = {"seq": comp.seq, "step": comp.name, "undo": name}
        if cp is not None:
            if cp.status == COMPLETED:
                return {**entry, "status": COMPLETED}
            if cp.status == FAILED:
                return {**entry, "status": FAILED, "error": cp.error}
            if cp.wake_at is not None and cp.wake_at > self._clock.now():
                raise self._suspend(cp.wake_at)
        port, history = self._port, self._history
        port.flush()
        attempt = (cp.attempts if cp is not None else 0) + 1
        started = self._clock.now()
        create = cp is None
        try:
            value = to_json(comp.undo(comp.input, comp.output), f"result of {name!r}")
        except Exception as exc:  # noqa: BLE001 - a failing undo is recorded, never raised
            err = error_record(exc)
            if err["retryable"] and attempt <= LOCAL_UNDO_RETRIES:
                retry_at = self._clock.now() + timedelta(seconds=attempt)
                retry = {"error": err, "attempts": attempt, "wake_at": retry_at, "started_at": started}
                port.defer(history.pending(seq, name, UNDO, create=create, **retry))
                port.flush()
                raise self._suspend(retry_at) from None
            port.defer(history.failed(seq, name, UNDO, err, create=create, attempts=attempt, started_at=started))
            port.flush()
            return {**entry, "status": FAILED, "error": err}
        port.defer(
            history.completed(seq, name, UNDO, create=create, output=value, attempts=attempt, started_at=started)
        )
        port.flush()
        return {**entry, "status": COMPLETED}
