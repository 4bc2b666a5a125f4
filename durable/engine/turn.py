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
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durable.engine import lifecycle
from durable.engine.context import WorkflowContext
from durable.engine.context_base import RUN_TOKEN, WAIT_KINDS
from durable.engine.ports import (
    CheckpointRecord,
    CheckpointWrite,
    CommitResult,
    Outcome,
    RunRecord,
    TurnWrites,
    Waiter,
)
from durable.engine.runs import clean_input, run_fields
from durable.engine.sagas import Compensation, run_compensations
from durable.engine.serialization import error_record, to_json
from durable.exceptions import (
    Blocked,
    CancelRequested,
    ContinueAsNew,
    DurableError,
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
    from durable.engine.leases import Hold

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
        self.waiters: list[Waiter] = []
        self.suspended = False
        self.compensations: list[Compensation] = []
        self.compensating = False
        # cancel(compensate=True) reached this run: stop at the first new operation.
        self.cancel_pending = run.cancel_requested
        self.max_recorded_seq = max(checkpoints, default=0)
        # The history as loaded (before this turn's writes).
        self.loaded = list(checkpoints.values())
        self.nondeterminism: NonDeterminismError | None = None
        # Dispatched steps already in flight that this turn waits on.
        self.step_seqs: list[int] = []
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

    def confirm_lease(self) -> None:
        """Check (and renew) the lease before a side effect when there is nothing to flush.

        A cancel that landed since the turn began then stops the turn before the
        side effect, instead of after it.
        """
        if self.writes:
            self.flush()
            return
        self.check_lease()
        # A read: the keeper renews the lease; this only asks whether a cancel took it.
        if not self._guard(lambda: self.engine.store.lease_held(self.run.id, self.engine.owner)):
            self.mark_lost()
            raise LeaseLost()

    def flush(self) -> None:
        """Commit deferred writes now (renewing the lease in the same statement)."""
        if not self.writes:
            return
        self.check_lease()
        now = self.engine.clock.now()
        done: CommitResult = self._guard(
            lambda: self.engine.store.commit(self.run.id, self.engine.owner, now, self.lease_until(now), self.writes)
        )
        if not done.written:
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

    def take_event(
        self, seq: int, name: str, match: dict[str, Any] | None, deadline: datetime | None, *, create: bool
    ) -> tuple[Any] | None:
        """Take the oldest buffered event matching ``match`` and record it at ``seq``, in one commit."""
        self.flush()
        now = self.engine.clock.now()
        got: tuple[Any] | None = self._guard(
            lambda: self.engine.store.take_event(
                self.run.id, self.engine.owner, now, self.lease_until(now), seq, name, match, create
            )
        )
        if got is None:
            return None
        self.checkpoints[seq] = CheckpointRecord(seq=seq, name=name, kind="event", status="completed", output=got[0])
        return got

    def resolve_run(self, run_id: str) -> RunRecord | None:
        """The run that settles ``run_id``: the end of its continue-as-new chain, or a successful retry."""
        found: RunRecord | None = self._guard(lambda: self.engine.store.resolve_run(run_id))
        return found

    def creating(self, run_id: str) -> bool:
        """Is ``run_id`` a run this turn started and has not committed yet?"""
        return any(fields["id"] == run_id for fields in self.writes.new_runs)

    def wait_on(self, token: str, seq: int, match: dict[str, Any] | None = None) -> None:
        self.waiters.append(Waiter(token, seq, match))

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


def run_turn(
    engine: Engine,
    run_id: str,
    *,
    acquired: RunRecord | None = None,
    fresh: bool = False,
    history: dict[int, CheckpointRecord] | None = None,
) -> str | None:
    """Run one turn of ``run_id`` if it is due and its lease is free.

    Returns the status the turn committed (``suspended``, ``completed``,
    ``failed``, ``blocked``), ``"lost"`` when the lease was lost, ``"fault"``
    when an infrastructure error abandoned the turn, or ``None`` when the run
    was not ours to take (not due, owned by someone else, finished).
    ``acquired`` is a run whose lease the caller already holds (orphan recovery,
    a step result that woke it, a start that inserted it leased); ``fresh``
    says it cannot have any history yet (its first turn, never attempted).
    ``history`` is its checkpoints, read by the caller after it took the
    lease (a sweep reads a whole page's in one query); nothing else writes
    them while the lease is held, except a step result, which the commit
    and ``poke_if_settled`` reconcile as they do for a history read here.
    """
    ready = prepare_turn(engine, run_id, acquired=acquired, fresh=fresh, history=history)
    if not isinstance(ready, ReadyTurn):
        return ready
    try:
        ok: CommitResult | Exception = engine.store.commit(
            ready.run.id, engine.owner, ready.done, ready.lease_until, ready.writes, ready.outcome
        )
    except Exception as exc:  # noqa: BLE001 - the commit failed; give the run back
        ok = exc
    return _settle(engine, ready, ok)


def run_turns(
    engine: Engine,
    claimed: list[tuple[RunRecord, dict[int, CheckpointRecord]]],
    should_stop: Callable[[], bool] = lambda: False,
) -> list[str | None]:
    """Run the turns of runs whose leases this process holds, and commit them together.

    ``claimed`` pairs each run with its history. Each turn runs as
    :func:`run_turn` would, up to its final commit; the final commits then
    go to the database at once (``Store.commit_many``: one statement per
    shape on PostgreSQL), each still conditional on its own lease, so a
    lost lease refuses that run's commit alone. A run's commit is only
    delayed, never merged with another run's outcome. Once ``should_stop()``
    is true, the runs whose turn has not started are handed back, still due
    (their result is None).
    """
    results: list[str | None] = [None] * len(claimed)
    ready: list[tuple[int, ReadyTurn]] = []
    started = time.monotonic()
    for i, (run, history) in enumerate(claimed):
        if should_stop():
            _hand_back(engine, [r for r, _ in claimed[i:]])
            break
        got = prepare_turn(engine, run.id, acquired=run, history=history)
        if isinstance(got, ReadyTurn):
            ready.append((i, got))
        else:
            results[i] = got
    if claimed:
        engine.stats.record_turns((time.monotonic() - started) / len(claimed))
    if not ready:
        return results
    owner = engine.owner
    # Each run's result, or the exception its own commit raised (the store falls back to
    # committing one by one when a shared statement fails).
    oks = engine.store.commit_many([(r.run.id, owner, r.done, r.lease_until, r.writes, r.outcome) for _, r in ready])
    for (i, r), ok in zip(ready, oks, strict=True):
        results[i] = _settle(engine, r, ok)
    return results


def _settle(engine: Engine, ready: ReadyTurn, ok: CommitResult | Exception) -> str:
    """After a final commit: written, refused (not ``written``) or failed (the exception)."""
    ready.hold.release()
    if isinstance(ok, Exception):
        return _abandon(engine, ready.run.id, ok)
    return finish_turn(engine, ready, ok)


@dataclass
class ReadyTurn:
    """A turn that ran to its end and awaits its final commit (its lease still renewed: ``hold``)."""

    turn: Turn
    run: RunRecord
    outcome: Outcome
    done: datetime
    lease_until: datetime
    hold: Hold

    @property
    def writes(self) -> TurnWrites:
        return self.turn.writes


def prepare_turn(
    engine: Engine,
    run_id: str,
    *,
    acquired: RunRecord | None = None,
    fresh: bool = False,
    history: dict[int, CheckpointRecord] | None = None,
) -> ReadyTurn | str | None:
    """Take the lease (unless ``acquired``) and run the workflow up to its final commit.

    Returns the turn ready to commit, or the turn's result when it ended
    without one (see :func:`run_turn`). A ready turn's lease is still
    renewed (``ReadyTurn.hold``) until its commit settles it: a batch of
    turns waiting for one shared commit keeps every lease of the batch.
    """
    store = engine.store
    owner = engine.owner
    clock = engine.clock
    now = clock.now()
    run = acquired or store.acquire(run_id, owner, now, now + timedelta(seconds=engine.settings.lease))
    if run is None:
        return None
    try:
        wf = engine.registry.get_workflow(run.workflow, run.version)
    except WorkflowNotFound as exc:
        reason = error_record(exc, code="workflow_not_registered", retryable=True)
        return "blocked" if store.block(run.id, owner, now, reason) else "lost"

    turn: Turn | None = None
    hold: Hold | None = None
    ready = False
    try:
        # A run's first turn has no history to read.
        first = fresh if acquired is not None else run.turns == 1
        if history is not None and acquired is not None:
            checkpoints = history
        else:
            checkpoints = {} if first else store.load_checkpoints(run.id)
        turn = Turn(engine, run, checkpoints)
        hold = engine.keeper.hold(
            engine.settings.lease / 3,
            lambda: store.renew_lease(run.id, owner, clock.now(), turn.lease_until(clock.now())),
            turn.mark_lost,
        )
        outcome = _execute(turn, wf.fn, wf.takes_input)
        done = clock.now()
        outcome.cancel_seen = turn.cancel_pending
        outcome.had_waiters = any(cp.kind in WAIT_KINDS and cp.status == "pending" for cp in turn.loaded)
        outcome.notify = [RUN_TOKEN + run.id] + ([RUN_TOKEN + run.retry_of] if run.retry_of else [])
        if outcome.status in ("completed", "failed") and outcome.next_run is None:
            # (A failed fleet read below gives the run back, as any read of ours that fails.)
            outcome.lifecycle = lifecycle.owed_record(engine, run.workflow, outcome.status)
        made = ReadyTurn(turn, run, outcome, done, turn.lease_until(done), hold)
        ready = True
        return made
    except LeaseLost:
        return _lost(engine, run.id)
    except Exception as exc:  # noqa: BLE001 - our own read failed; give the run back
        # Our own read failed before user code ran.
        return _abandon(engine, run.id, exc)
    except EngineFault as fault:
        return _abandon(engine, run.id, fault.original)
    finally:
        if hold is not None and not ready:
            hold.release()


def finish_turn(engine: Engine, ready: ReadyTurn, result: CommitResult) -> str:
    """What follows a turn's final commit (as the store reports it): wake, dispatch, emit."""
    turn, run, outcome, done = ready.turn, ready.run, ready.outcome, ready.done
    if not result.written:
        return _lost(engine, run.id)
    turn.run_after_commit()
    for woken in result.woken:
        try:
            engine.transport.dispatch_turn(woken)
        except Exception:
            logger.warning("could not dispatch woken run %s", woken, exc_info=True)
    if outcome.status == "suspended" and result.wake_at is not None:
        delay = (result.wake_at - done).total_seconds()
        try:
            engine.transport.dispatch_turn(run.id, delay=max(delay, 0.0))
        except Exception:
            logger.warning("could not dispatch the next turn of %s; the sweep will", run.id, exc_info=True)
    run.status = outcome.status
    run.output, run.error = outcome.output, outcome.error
    engine.emit(outcome.status, run)
    if outcome.lifecycle is not None:
        try:
            lifecycle.publish(engine, run.id)
        except Exception:
            logger.warning("lifecycle publish of %s deferred to the sweep", run.id, exc_info=True)
    return outcome.status


def _execute(turn: Turn, fn: Callable[..., Any], takes_input: bool) -> Outcome:
    ctx = WorkflowContext(turn)
    run = turn.run
    try:
        try:
            result = fn(ctx, run.input) if takes_input else fn(ctx)
            if turn.nondeterminism is not None:
                raise turn.nondeterminism
            if turn.suspended:
                # The workflow swallowed a Suspend with a bare except; it is still waiting.
                raise Suspend()
        except CancelRequested:
            return _cancel(turn, ctx)
        except ContinueAsNew as cont:
            return _continue_as_new(turn, cont.input)
        except (Suspend, Blocked, LeaseLost, EngineFault):
            raise
        except Exception as exc:  # noqa: BLE001 - any user error fails the run
            turn.check_lease()
            if turn.nondeterminism is not None:
                return Outcome("failed", error=_failure(turn.nondeterminism))
            if turn.cancel_pending:
                # Replaying a run being cancelled: the cancelled operation raised here.
                return _cancel(turn, ctx)
            error = _failure(exc)
            if turn.compensations:
                error["compensation"] = _compensate(ctx)
            return Outcome("failed", error=error)
        try:
            output = to_json(result, "workflow result", max_bytes=turn.engine.settings.max_payload_bytes)
        except InvalidInput as exc:
            return Outcome("failed", error=error_record(exc, code="invalid_output", retryable=False))
        return Outcome("completed", output=output)
    except Suspend:
        now = turn.engine.clock.now()
        return Outcome("suspended", wake_at=turn.next_wake(now), waiters=turn.waiters, step_seqs=turn.step_seqs)
    except Blocked as blocked:
        return Outcome("blocked", error=blocked.reason)


def _cancel(turn: Turn, ctx: WorkflowContext) -> Outcome:
    """cancel(compensate=True): stop what is in flight, undo what completed, end cancelled."""
    stopped_at = ctx._seq
    for seq, cp in list(turn.checkpoints.items()):
        # What was in flight where the workflow stopped; the undo steps come after it.
        if seq <= stopped_at and cp.status in ("pending", "running"):
            rec = CheckpointRecord(
                seq=seq,
                name=cp.name,
                kind=cp.kind,
                status="failed",
                finished_at=turn.engine.clock.now(),
                error={
                    "message": "cancelled",
                    "code": "cancelled",
                    "retryable": False,
                    "type": "Cancelled",
                    "traceback": None,
                },
            )
            turn.defer(CheckpointWrite(rec, create=False, expect=("pending", "running")))
    turn.waiters.clear()
    report = _compensate(ctx)
    timeout = turn.run.error if isinstance(turn.run.error, dict) else {}
    if timeout.get("code") == "timeout":
        # Stopped by its execution timeout: a failure, with the saga's report.
        return Outcome("failed", error={**timeout, "compensation": report})
    return Outcome(
        "cancelled",
        error={
            "message": "cancelled, completed steps undone",
            "code": "cancelled",
            "retryable": False,
            "type": "Cancelled",
            "traceback": None,
            "compensation": report,
        },
    )


def _compensate(ctx: WorkflowContext) -> list[dict[str, Any]]:
    try:
        return run_compensations(ctx)
    except (Suspend, LeaseLost, EngineFault):
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. the code changed under the undo history
        return [{"status": "error", "error": error_record(exc, retryable=False)}]


def _continue_as_new(turn: Turn, value: Any) -> Outcome:
    """Build the next run of the chain; it is inserted in the same commit that completes this one."""
    run = turn.run
    base, _, counter = run.id.rpartition("~")
    next_id = f"{base}~{int(counter) + 1}" if base and counter.isdigit() else f"{run.id}~1"
    try:
        wf = turn.engine.registry.get_workflow(run.workflow)
        cleaned = clean_input(wf, value, turn.engine.settings.max_payload_bytes)
    except DurableError as exc:
        return Outcome("failed", error=error_record(exc, code="continue_as_new_failed", retryable=False))
    fields = run_fields(
        wf,
        next_id,
        cleaned,
        now=turn.engine.clock.now(),
        namespace=run.namespace,
        tags=list(run.tags),
        search_attributes=dict(run.search_attributes),
        priority=run.priority,
        parent_id=run.parent_id,
    )
    turn.after_commit(lambda: turn.engine.transport.dispatch_turn(next_id))
    return Outcome("completed", output={"continued_as": next_id}, next_run=fields)


def _lost(engine: Engine, run_id: str) -> str:
    """A commit was refused. Usually the lease is gone (cancel, takeover) and this changes
    nothing; if it is still ours (a step claim was taken away), hand the run back at once."""
    now = engine.clock.now()
    try:
        if engine.store.release(run_id, engine.owner, now, now, False):
            engine.transport.dispatch_turn(run_id)
    except Exception:
        logger.warning("could not hand back %s; its lease will expire", run_id, exc_info=True)
    return "lost"


def _hand_back(engine: Engine, runs: list[RunRecord]) -> None:
    now = engine.clock.now()
    for run in runs:
        try:
            engine.store.release(run.id, engine.owner, now, run.wake_at or now, False)
        except Exception:
            logger.warning("could not hand back %s; its lease will expire", run.id, exc_info=True)


def _abandon(engine: Engine, run_id: str, exc: BaseException) -> str:
    """Give the run back after an infrastructure error, counting it as a recovery."""
    logger.warning("turn of %s abandoned: %s", run_id, exc, exc_info=exc)
    now = engine.clock.now()
    try:
        status = engine.store.release(
            run_id, engine.owner, now, now + FAULT_RETRY, True, engine.settings.max_recovery_attempts
        )
        if status == "dead":
            logger.error("run %s dead-lettered: its turn keeps failing (%s)", run_id, exc)
            engine.store.notify_settled(run_id, now)
    except Exception:
        # The lease will expire and the orphan sweep will take the run.
        logger.warning("could not release %s after a fault", run_id, exc_info=True)
    return "fault"
