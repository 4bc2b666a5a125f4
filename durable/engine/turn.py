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
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from durable.engine import history_cache, lifecycle, logs, observe
from durable.engine.history import History
from durable.engine.observe import NOOP_SPAN, Span
from durable.engine.outcome import execute
from durable.engine.ports import CheckpointRecord, CommitResult, Outcome, RunRecord, TurnWrites
from durable.engine.registry import WorkflowDef
from durable.engine.serialization import error_record
from durable.engine.turn_state import Turn
from durable.engine.vocab import RUN_TOKEN, TERMINAL, RunStatus, TurnResult
from durable.exceptions import EngineFault, LeaseLost, WorkflowNotFound

if TYPE_CHECKING:
    from durable.engine.core import Engine
    from durable.engine.leases import Hold
    from durable.engine.resident import Parked

logger = logging.getLogger("durable.turn")

Checkpoints = dict[int, CheckpointRecord]

# Back-off before retrying a turn abandoned on an infrastructure error.
FAULT_RETRY = timedelta(seconds=1)


@dataclass
class ReadyTurn:
    """A turn that ran to its end and awaits its final commit (its lease still renewed: ``hold``)."""

    turn: Turn
    run: RunRecord
    outcome: Outcome
    done: datetime
    lease_until: datetime
    hold: Hold
    span: Span = NOOP_SPAN

    @property
    def writes(self) -> TurnWrites:
        return self.turn.writes


def run_turn(
    engine: Engine,
    run_id: str,
    *,
    acquired: RunRecord | None = None,
    fresh: bool = False,
    history: dict[int, CheckpointRecord] | None = None,
) -> TurnResult | None:
    """Run one turn of ``run_id`` if it is due and its lease is free.

    Returns the status the turn committed (``suspended``, ``completed``,
    ``failed``, ``blocked``, ``cancelled``), ``LOST`` when the lease was lost,
    ``FAULT`` when an infrastructure error abandoned the turn, or ``None``
    when the run was not ours to take (not due, owned by someone else, finished).
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
    claimed: list[tuple[RunRecord, dict[int, CheckpointRecord] | None]],
    should_stop: Callable[[], bool] = lambda: False,
) -> list[TurnResult | None]:
    """Run the turns of runs whose leases this process holds, and commit them together.

    ``claimed`` pairs each run with its history (None: the turn reads it,
    from the history cache when that serves it). Each turn runs as
    :func:`run_turn` would, up to its final commit; the final commits then
    go to the database at once (``Store.commit_many``: one statement per
    shape on PostgreSQL), each still conditional on its own lease, so a
    lost lease refuses that run's commit alone. A run's commit is only
    delayed, never merged with another run's outcome. Once ``should_stop()``
    is true, the runs whose turn has not started are handed back, still due
    (their result is None).
    """
    results: list[TurnResult | None] = [None] * len(claimed)
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


def _settle(engine: Engine, ready: ReadyTurn, ok: CommitResult | Exception) -> TurnResult:
    """After a final commit: its result (written or refused), or the exception it raised."""
    ready.hold.release()
    if isinstance(ok, Exception):
        ready.turn.end_parked()
        ready.span.fail(ok)
        return _ended(ready.span, _abandon(engine, ready.run.id, ok))
    return _ended(ready.span, finish_turn(engine, ready, ok))


def prepare_turn(
    engine: Engine,
    run_id: str,
    *,
    acquired: RunRecord | None = None,
    fresh: bool = False,
    history: dict[int, CheckpointRecord] | None = None,
) -> ReadyTurn | TurnResult | None:
    """Take the lease (unless ``acquired``) and run the workflow up to its final commit.

    Returns the turn ready to commit, or the turn's result when it ended
    without one (see :func:`run_turn`). A ready turn's lease is still
    renewed (``ReadyTurn.hold``) until its commit settles it: a batch of
    turns waiting for one shared commit keeps every lease of the batch.
    """
    store, owner = engine.store, engine.owner
    now = engine.clock.now()
    run = acquired or store.acquire(run_id, owner, now, now + timedelta(seconds=engine.settings.lease))
    if run is None:
        return None
    span = _begin(engine, run, now)
    try:
        wf = engine.registry.get_workflow(run.workflow, run.version)
    except WorkflowNotFound as exc:
        reason = error_record(exc, code="workflow_not_registered", retryable=True)
        if not store.block(run.id, owner, now, reason):
            return _ended(span, TurnResult.LOST)
        engine.emit_settled(RunStatus.BLOCKED, [run.id])
        return _ended(span, TurnResult.BLOCKED)
    hold: Hold | None = None
    try:
        # A run's first turn has no history to read.
        first = fresh if acquired is not None else run.turns == 1
        history, parked, cached = _history(engine, run, first, history if acquired is not None else None, now)
        if parked is not None and not parked.resumable(engine, wf.fn):
            parked.end()
            parked = None
        kept, read_now = cached if cached is not None else (None, None)
        records = History(run.id, history, engine.clock, cancelling=run.cancel_requested, kept=kept, fresh=read_now)
        turn = Turn(engine, run, records)
        if engine.resident:
            turn.allow_parking()
        if first and not history:
            turn.lease_taken()
        turn.span = span
        hold = engine.keeper.hold(engine.settings.lease / 3, lambda: _renew(engine, turn), turn.mark_lost)
        made = _replay(engine, turn, wf, hold, parked)
        made.span = span
        hold = None  # the ready turn holds it now
        return made
    except LeaseLost:
        return _ended(span, _lost(engine, run.id))
    except Exception as exc:  # noqa: BLE001 - our own read failed; give the run back
        # Our own read failed before user code ran.
        span.fail(exc)
        return _ended(span, _abandon(engine, run.id, exc))
    except EngineFault as fault:
        span.fail(fault.original)
        return _ended(span, _abandon(engine, run.id, fault.original))
    finally:
        if hold is not None:
            hold.release()


def _history(
    engine: Engine, run: RunRecord, first: bool, given: dict[int, CheckpointRecord] | None, now: datetime
) -> tuple[dict[int, CheckpointRecord], Parked | None, tuple[Checkpoints, Checkpoints] | None]:
    """The run's checkpoints for this turn: none on its first turn, ``given``, else from the cache or the store;
    its workflow parked by the turn before, and the records the cache kept and read now, when its entry served.

    The cache's entry for the run is taken out whatever happens: only this
    turn's final commit puts one back. A parked workflow it held and that is
    not handed on is ended.
    """
    entry = engine.histories.take(run.id, now)
    parked = entry.parked if entry is not None else None
    restored = None
    if not first and given is None:
        restored = history_cache.restore(entry, engine.store, run, engine.owner)
    if restored is None and parked is not None:
        parked.end()
        parked = None
    if first:
        return {}, None, None
    if given is not None:
        return given, None, None
    if restored is None:
        return engine.store.load_checkpoints(run.id), None, None
    records, kept, fresh = restored
    return records, parked, (kept, fresh)


def _begin(engine: Engine, run: RunRecord, now: datetime) -> Span:
    """The turn's span; ``lateness``: how long after its wake the run was taken (a timer's lateness)."""
    if not engine.observer.enabled:
        return NOOP_SPAN
    attributes = {"run_id": run.id, "workflow": run.workflow, "version": run.version, "turn": run.turns}
    if run.wake_at is not None:
        attributes["lateness"] = max((now - run.wake_at).total_seconds(), 0.0)
    return engine.observer.begin(observe.TURN, attributes, trace=run.trace_context)


def _ended(span: Span, result: TurnResult) -> TurnResult:
    span.end(result.value)
    return result


def _renew(engine: Engine, turn: Turn) -> bool:
    now = engine.clock.now()
    return engine.store.renew_lease(turn.run.id, engine.owner, now, turn.lease_until(now))


def _replay(engine: Engine, turn: Turn, wf: WorkflowDef, hold: Hold, parked: Parked | None = None) -> ReadyTurn:
    """Run the workflow function in ``turn`` (or resume it: ``parked``) and complete its outcome to commit."""
    run = turn.run
    outcome = execute(turn, wf.fn, wf.takes_input, parked)
    done = engine.clock.now()
    outcome.cancel_seen = turn.history.cancelling
    outcome.had_waiters = turn.history.had_waiters
    outcome.notify = [RUN_TOKEN + run.id] + ([RUN_TOKEN + run.retry_of] if run.retry_of else [])
    if outcome.status in (RunStatus.COMPLETED, RunStatus.FAILED) and outcome.next_run is None:
        # (A failed fleet read below gives the run back, as any read of ours that fails.)
        outcome.lifecycle = lifecycle.owed_record(engine, run.workflow, outcome.status)
    if outcome.status in TERMINAL and run.singleton_key is not None:
        # Its slot goes to the key's next waiting run in the same commit.
        outcome.slot = (run.workflow, run.singleton_key)
    return ReadyTurn(turn, run, outcome, done, turn.lease_until(done), hold)


def finish_turn(engine: Engine, ready: ReadyTurn, result: CommitResult) -> TurnResult:
    """What follows a turn's final commit (as the store reports it): wake, dispatch, emit."""
    run, outcome = ready.run, ready.outcome
    if not result.written:
        ready.turn.end_parked()
        return _lost(engine, run.id)
    if outcome.status == RunStatus.SUSPENDED:
        parked, ready.turn.parked = ready.turn.parked, None
        engine.histories.keep(run, engine.owner, ready.turn.history, ready.done, parked)
    ready.turn.run_after_commit()
    _dispatch_after(engine, ready, result)
    run.status = outcome.status
    run.output, run.error = outcome.output, outcome.error
    engine.emit(outcome.status, run)
    if result.cancelled:
        engine.emit_settled(RunStatus.CANCELLED, result.cancelled)
    if outcome.lifecycle is not None:
        try:
            lifecycle.publish(engine, run.id)
        except Exception:
            logger.warning(
                "lifecycle publish of %s deferred to the sweep", run.id, exc_info=True, extra=logs.of_run(run)
            )
    return TurnResult(outcome.status)


def _dispatch_after(engine: Engine, ready: ReadyTurn, result: CommitResult) -> None:
    """Announce the runs the commit woke, and this run's next turn if it suspended with a wake."""
    for woken in result.woken:
        try:
            engine.transport.dispatch_turn(woken)
        except Exception:
            logger.warning("could not dispatch woken run %s", woken, exc_info=True, extra=logs.fields(woken))
    if ready.outcome.status == RunStatus.SUSPENDED and result.wake_at is not None:
        run_id = ready.run.id
        delay = (result.wake_at - ready.done).total_seconds()
        try:
            engine.transport.dispatch_turn(run_id, delay=max(delay, 0.0), namespace=ready.run.namespace)
        except Exception:
            logger.warning(
                "could not dispatch the next turn of %s; the sweep will",
                run_id,
                exc_info=True,
                extra=logs.of_run(ready.run),
            )


def _lost(engine: Engine, run_id: str) -> TurnResult:
    """A commit was refused. Usually the lease is gone (cancel, takeover) and this changes
    nothing; if it is still ours (a step claim was taken away), hand the run back at once."""
    now = engine.clock.now()
    try:
        if engine.store.release(run_id, engine.owner, now, now, False):
            engine.transport.dispatch_turn(run_id)
    except Exception:
        logger.warning(
            "could not hand back %s; its lease will expire", run_id, exc_info=True, extra=logs.fields(run_id)
        )
    return TurnResult.LOST


def _hand_back(engine: Engine, runs: list[RunRecord]) -> None:
    now = engine.clock.now()
    for run in runs:
        try:
            engine.store.release(run.id, engine.owner, now, run.wake_at or now, False)
        except Exception:
            logger.warning(
                "could not hand back %s; its lease will expire", run.id, exc_info=True, extra=logs.of_run(run)
            )


def _abandon(engine: Engine, run_id: str, exc: BaseException) -> TurnResult:
    """Give the run back after an infrastructure error, counting it as a recovery."""
    logger.warning("turn of %s abandoned: %s", run_id, exc, exc_info=exc, extra=logs.fields(run_id))
    now = engine.clock.now()
    try:
        status = engine.store.release(
            run_id, engine.owner, now, now + FAULT_RETRY, True, engine.settings.max_recovery_attempts
        )
        if status == RunStatus.DEAD:
            logger.error("run %s dead-lettered: its turn keeps failing (%s)", run_id, exc, extra=logs.fields(run_id))
            engine.store.notify_settled(run_id, now)
            engine.emit_settled(RunStatus.DEAD, [run_id])
    except Exception:
        # The lease will expire and the orphan sweep will take the run.
        logger.warning("could not release %s after a fault", run_id, exc_info=True, extra=logs.fields(run_id))
    return TurnResult.FAULT
