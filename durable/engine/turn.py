"""One turn of a run: acquire its lease, replay the workflow, commit the outcome.

Guarantees:

* Only the lease holder runs a turn, and every write of the turn is
  compare-and-set on ``status = 'running' AND locked_by = <us>``: a turn that
  lost its lease (expired, cancelled, timed out) writes nothing.
* The outcome (status, output or error, new checkpoints, waiters, wake time)
  commits in one transaction, and that same write releases the lease.
* Dispatches announced by the turn (steps, the next turn) happen after commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durable.engine import clock
from durable.engine.context import WorkflowContext
from durable.engine.ports import CheckpointRecord, CheckpointWrite, Outcome, RunRecord, TurnWrites
from durable.engine.registry import registry
from durable.engine.serialization import error_record, to_json
from durable.exceptions import (
    Blocked,
    EngineFault,
    InvalidInput,
    LeaseLost,
    NonDeterminismError,
    StepFailed,
    Suspend,
    WorkflowNotFound,
)

if TYPE_CHECKING:
    from durable.engine.core import Engine

logger = logging.getLogger("durable.turn")

# Back-off before retrying a turn abandoned on an infrastructure error.
FAULT_RETRY = timedelta(seconds=1)


class Turn:
    """State of one turn: the replay snapshot and the writes not yet committed."""

    def __init__(self, engine: Engine, run: RunRecord, checkpoints: dict[int, CheckpointRecord]) -> None:
        self.engine = engine
        self.run = run
        self.checkpoints = checkpoints
        self.writes = TurnWrites()
        self.waiters: list[tuple[str, int]] = []
        self.suspended = False
        self._wakes: list[datetime] = []
        self._event_wait = False
        self._after_commit: list[Callable[[], None]] = []
        self._lost = threading.Event()
        self._taken_signals: list[int] = []

    # -- lease -------------------------------------------------------------
    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.engine.settings.lease)

    def mark_lost(self) -> None:
        self._lost.set()

    def check_lease(self) -> None:
        if self._lost.is_set():
            raise LeaseLost()

    # -- writes ------------------------------------------------------------
    def defer(self, write: CheckpointWrite) -> None:
        self.writes.checkpoints.append(write)
        self.checkpoints[write.record.seq] = write.record

    def after_commit(self, fn: Callable[[], None]) -> None:
        self._after_commit.append(fn)

    def flush(self) -> None:
        """Commit deferred writes now (renewing the lease in the same statement)."""
        if not self.writes:
            return
        self.check_lease()
        now = clock.now()
        ok = self._guard(
            lambda: self.engine.store.commit(self.run.id, self.engine.owner, now, self.lease_until(now), self.writes)
        )
        if not ok:
            self.mark_lost()
            raise LeaseLost()
        self.writes = TurnWrites()
        self.run_after_commit()

    def run_after_commit(self) -> None:
        callbacks, self._after_commit = self._after_commit, []
        for fn in callbacks:
            try:
                fn()
            except Exception:
                # A lost dispatch is re-driven by the sweeps; it must not fail the turn.
                logger.warning("dispatch after commit failed for run %s", self.run.id, exc_info=True)

    def take_signal(self, name: str) -> tuple[int, Any] | None:
        got: tuple[int, Any] | None = self._guard(
            lambda: self.engine.store.next_signal(self.run.id, name, self._taken_signals)
        )
        if got is not None:
            self._taken_signals.append(got[0])
        return got

    @staticmethod
    def _guard(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (LeaseLost, EngineFault):
            raise
        except Exception as exc:
            raise EngineFault(exc) from exc

    # -- suspension --------------------------------------------------------
    def suspend(self, wake_at: datetime | None, *, event: bool) -> None:
        self.suspended = True
        if wake_at is not None:
            self._wakes.append(wake_at)
        if event:
            self._event_wait = True

    def next_wake(self, now: datetime) -> datetime:
        wakes = list(self._wakes)
        if self._event_wait or not wakes:
            # Reconcile fallback: a run waiting on an event is looked at again even if its wake is lost.
            wakes.append(now + timedelta(seconds=self.engine.settings.reconcile_after))
        return min(wakes)


def _failure(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, StepFailed):
        err = error_record(exc, code="step_failed", retryable=False)
        err["step"] = {"name": exc.step, "seq": exc.seq, "attempts": exc.attempts, "error": exc.error}
        return err
    if isinstance(exc, NonDeterminismError):
        return error_record(exc, code="non_determinism", retryable=False)
    return error_record(exc)


def run_turn(engine: Engine, run_id: str, *, acquired: RunRecord | None = None) -> str | None:
    """Run one turn of ``run_id`` if it is due and its lease is free.

    Returns the status the turn committed (``suspended``, ``completed``,
    ``failed``, ``blocked``), ``"lost"`` when the lease was lost, ``"fault"``
    when an infrastructure error abandoned the turn, or ``None`` when the run
    was not ours to take (not due, owned by someone else, finished).
    ``acquired`` is a run whose lease the caller already holds (orphan recovery).
    """
    store = engine.store
    owner = engine.owner
    now = clock.now()
    run = acquired or store.acquire(run_id, owner, now, now + timedelta(seconds=engine.settings.lease))
    if run is None:
        return None
    try:
        wf = registry.get_workflow(run.workflow, run.version)
    except WorkflowNotFound as exc:
        reason = error_record(exc, code="workflow_not_registered", retryable=True)
        return "blocked" if store.block(run.id, owner, now, reason) else "lost"

    turn: Turn | None = None
    hold = None
    try:
        checkpoints = store.load_checkpoints(run.id)
        turn = Turn(engine, run, checkpoints)
        hold = engine.keeper.hold(
            engine.settings.lease / 3,
            lambda: store.renew_lease(run.id, owner, clock.now(), turn.lease_until(clock.now())),
            turn.mark_lost,
        )
        outcome = _execute(turn, wf.fn, wf.takes_input)
    except LeaseLost:
        return "lost"
    except Exception as exc:  # noqa: BLE001 - our own read failed; give the run back
        # Our own read failed before user code ran.
        return _abandon(engine, run.id, exc)
    except EngineFault as fault:
        return _abandon(engine, run.id, fault.original)
    finally:
        if hold is not None:
            hold.release()

    done = clock.now()
    try:
        ok = store.commit(run.id, owner, done, turn.lease_until(done), turn.writes, outcome)
    except Exception as exc:  # noqa: BLE001 - the commit failed; give the run back
        return _abandon(engine, run.id, exc)
    if not ok:
        return "lost"
    turn.run_after_commit()
    if outcome.status == "suspended" and outcome.wake_at is not None:
        delay = (outcome.wake_at - done).total_seconds()
        try:
            engine.transport.dispatch_turn(run.id, delay=max(delay, 0.0))
        except Exception:
            logger.warning("could not dispatch the next turn of %s; the sweep will", run.id, exc_info=True)
    engine.emit(outcome.status, run)
    return outcome.status


def _execute(turn: Turn, fn: Callable[..., Any], takes_input: bool) -> Outcome:
    ctx = WorkflowContext(turn)
    run = turn.run
    try:
        result = fn(ctx, run.input) if takes_input else fn(ctx)
        if turn.suspended:
            # The workflow swallowed a Suspend with a bare except; it is still waiting.
            raise Suspend()
        try:
            output = to_json(result, "workflow result", max_bytes=turn.engine.settings.max_payload_bytes)
        except InvalidInput as exc:
            return Outcome("failed", error=error_record(exc, code="invalid_output", retryable=False))
        return Outcome("completed", output=output)
    except Suspend:
        now = clock.now()
        return Outcome("suspended", wake_at=turn.next_wake(now), waiters=turn.waiters)
    except Blocked as blocked:
        return Outcome("blocked", error=blocked.reason)
    except (LeaseLost, EngineFault):
        raise
    except Exception as exc:  # noqa: BLE001 - any user error fails the run
        turn.check_lease()
        return Outcome("failed", error=_failure(exc))


def _abandon(engine: Engine, run_id: str, exc: BaseException) -> str:
    """Give the run back after an infrastructure error, counting it as a recovery."""
    logger.warning("turn of %s abandoned: %s", run_id, exc, exc_info=exc)
    now = clock.now()
    try:
        engine.store.release(run_id, engine.owner, now, now + FAULT_RETRY, True)
    except Exception:
        # The lease will expire and the orphan sweep will take the run.
        logger.warning("could not release %s after a fault", run_id, exc_info=True)
    return "fault"
