"""How a turn's replay of the workflow function ends: an :class:`Outcome` to commit.

The workflow returns (completed), raises (failed, after its saga undoes what
completed), suspends (waits on a timer, a step, a signal...), is blocked (no
worker can run a step), continues as a new run, or stops for a cancel with
undo. Control flow that is the engine's own (``LeaseLost``, ``EngineFault``)
passes through: the turn is abandoned, nothing is committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from durable.engine import resident
from durable.engine.context import WorkflowContext
from durable.engine.history import IN_FLIGHT, cancelled_error
from durable.engine.new_runs import clean_input, successor_fields
from durable.engine.ports import Outcome
from durable.engine.resident import Parked
from durable.engine.serialization import Undecodable, decoded, error_record, to_json
from durable.engine.turn_state import Turn
from durable.engine.vocab import RunStatus
from durable.exceptions import (
    Blocked,
    CancelRequested,
    CodecError,
    ContinueAsNew,
    DurableError,
    EngineFault,
    InvalidInput,
    LeaseLost,
    NonDeterminismError,
    StepFailed,
    Suspend,
)


def _failure(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, StepFailed):
        err = error_record(exc, code="step_failed", retryable=False)
        err["step"] = {"name": exc.step, "seq": exc.seq, "attempts": exc.attempts, "error": exc.error}
        return err
    if isinstance(exc, NonDeterminismError):
        return error_record(exc, code="non_determinism", retryable=False)
    return error_record(exc)


def _nondeterminism(turn: Turn, exc: NonDeterminismError) -> dict[str, Any]:
    """The run's error for ``exc``; a fork's says that its copied history is what no longer replays."""
    error = _failure(exc)
    run = turn.run
    if run.forked_from:
        error["message"] += (
            f" This run is a fork of {run.forked_from!r} at position {run.forked_at_seq}: the positions before "
            "it replay the original's history, so with this input (and this code) the workflow must take the "
            "same operations up to there."
        )
        error["forked_from"] = {"run_id": run.forked_from, "seq": run.forked_at_seq}
    return error


def execute(turn: Turn, fn: Callable[..., Any], takes_input: bool, parked: Parked | None = None) -> Outcome:
    """Replay ``fn`` (the workflow function) in ``turn``, or resume ``parked`` (its workflow paused by an
    earlier turn of this process: :mod:`durable.engine.resident`), and return how it ended."""
    if parked is not None:
        ctx = parked.ctx
        ctx._rebind(turn.history, turn)
    else:
        ctx = WorkflowContext(turn.history, turn)
    history = turn.history
    try:
        try:
            _check_decoded(turn)
            result = _call(turn, ctx, fn, takes_input, parked)
            if history.nondeterminism is not None:
                raise history.nondeterminism
            if turn.suspended:
                # The workflow swallowed a Suspend with a bare except; it is still waiting.
                raise Suspend()
        except CancelRequested:
            return _cancel(turn, ctx)
        except ContinueAsNew as cont:
            return _continue_as_new(turn, cont.input)
        except CodecError as exc:
            # Replaying cannot go on without the value, and a retry would meet the same bytes.
            return Outcome(RunStatus.FAILED, error=error_record(exc, code="codec_error", retryable=False))
        except (Suspend, Blocked, LeaseLost, EngineFault):
            raise
        except Exception as exc:  # noqa: BLE001 - any user error fails the run
            return _failed(turn, ctx, exc)
        try:
            output = to_json(result, "workflow result", max_bytes=turn.engine.settings.max_payload_bytes)
        except InvalidInput as exc:
            return Outcome(RunStatus.FAILED, error=error_record(exc, code="invalid_output", retryable=False))
        return Outcome(RunStatus.COMPLETED, output=output)
    except Suspend:
        now = turn.engine.clock.now()
        return Outcome(RunStatus.SUSPENDED, wake_at=turn.next_wake(now), waiters=turn.waiters, step_seqs=turn.step_seqs)
    except Blocked as blocked:
        return Outcome(RunStatus.BLOCKED, error=blocked.reason)


def _call(turn: Turn, ctx: WorkflowContext, fn: Callable[..., Any], takes_input: bool, parked: Parked | None) -> Any:
    """What the workflow function returns in this turn; Suspend when it parked (kept on ``turn.parked``)."""
    run = turn.run
    if parked is not None:
        result, glet = resident.resume(parked)
    elif turn.parks:
        result, glet = resident.start(lambda: fn(ctx, run.input) if takes_input else fn(ctx))
    else:
        return fn(ctx, run.input) if takes_input else fn(ctx)
    if glet is not None:
        turn.parked = Parked(glet, ctx, fn, turn.engine, threading.get_ident())
        raise Suspend()
    return result


def _check_decoded(turn: Turn) -> None:
    """Raise CodecError when the run's input or any payload of its history did not decode."""
    run = turn.run
    if isinstance(run.input, Undecodable):
        decoded(run.input, f"the input of run {run.id!r}")
    if isinstance(run.query_values, Undecodable):
        decoded(run.query_values, f"the published values of run {run.id!r}")
    # Every row read for this turn (the history cache's were checked by the turn that read them):
    # the message is built only for the one that fails.
    for cp in turn.history.fresh.values():
        for what in ("input", "output", "error"):
            value = getattr(cp, what)
            if isinstance(value, Undecodable):
                decoded(value, f"the {what} of {cp.kind} {cp.name!r} (#{cp.seq}) of run {run.id!r}")


def _failed(turn: Turn, ctx: WorkflowContext, exc: Exception) -> Outcome:
    """The workflow raised ``exc``: fail the run, after its saga (or stop for a cancel being replayed)."""
    turn.check_lease()
    history = turn.history
    if history.nondeterminism is not None:
        return Outcome(RunStatus.FAILED, error=_nondeterminism(turn, history.nondeterminism))
    if history.cancelling:
        # Replaying a run being cancelled: the cancelled operation raised here.
        return _cancel(turn, ctx)
    error = _failure(exc)
    if ctx._has_undo():
        error["compensation"] = _compensate(ctx)
    return Outcome(RunStatus.FAILED, error=error)


def _cancel(turn: Turn, ctx: WorkflowContext) -> Outcome:
    """cancel(compensate=True): stop what is in flight, undo what completed, end cancelled."""
    history = turn.history
    # What was in flight where the workflow stopped; the undo steps come after it.
    for cp in history.in_flight_up_to(history.seq):
        turn.defer(history.failed(cp.seq, cp.name, cp.kind, cancelled_error(), expect=IN_FLIGHT))
    turn.clear_waiters()
    report = _compensate(ctx)
    timeout = turn.run.error if isinstance(turn.run.error, dict) else {}
    if timeout.get("code") == "timeout":
        # Stopped by its execution timeout: a failure, with the saga's report.
        return Outcome(RunStatus.FAILED, error={**timeout, "compensation": report})
    error = cancelled_error("cancelled, completed steps undone", compensation=report)
    return Outcome(RunStatus.CANCELLED, error=error)


def _compensate(ctx: WorkflowContext) -> list[dict[str, Any]]:
    try:
        return ctx._compensate()
    except (Suspend, LeaseLost, EngineFault):
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. the code changed under the undo history
        return [{"status": "error", "error": error_record(exc, retryable=False)}]


def _continue_as_new(turn: Turn, value: Any) -> Outcome:
    """Build the next run of the chain; it is inserted in the same commit that completes this one."""
    run, engine = turn.run, turn.engine
    base, _, counter = run.id.rpartition("~")
    next_id = f"{base}~{int(counter) + 1}" if base and counter.isdigit() else f"{run.id}~1"
    try:
        wf = engine.registry.get_workflow(run.workflow)
        cleaned = clean_input(wf, value, engine.settings.max_payload_bytes)
    except DurableError as exc:
        return Outcome(RunStatus.FAILED, error=error_record(exc, code="continue_as_new_failed", retryable=False))
    fields = successor_fields(wf, next_id, cleaned, run, now=engine.clock.now(), parent_id=run.parent_id)
    turn.after_commit(lambda: engine.transport.dispatch_turn(next_id, namespace=run.namespace))
    return Outcome(RunStatus.COMPLETED, output={"continued_as": next_id}, next_run=fields)
