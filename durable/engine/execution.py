"""Execution of dispatched steps on a worker.

A step is claimed (``pending`` → ``running``, one attempt counted) before it
runs and settled with compare-and-set on ``pending``/``running``, so:

* a duplicate or late delivery of the same step id finds nothing to claim;
* a settled checkpoint always wins over a re-dispatch (the first outcome is kept);
* a result is the claim's (owner and attempt): once a sweep counted the
  attempt lost (its execution lease lapsed, or it timed out) the late result
  of that attempt is refused, not recorded, and the attempt stays a failed one;
* a result for a cancelled or completed run is dropped; a late result for a
  failed run is kept for a later requeue but does not resume it.

The worker that settles a step continues the run's next turn itself, saving a
round trip through the broker. The path of a step result goes one way: this
module settles it and hands the run to :mod:`durable.engine.turn`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durable.engine import admission, observe, turn
from durable.engine.current_step import StepInfo, running
from durable.engine.observe import NOOP_SPAN, Span
from durable.engine.ports import ClaimCheck, StepClaim
from durable.engine.retry import retry_delay
from durable.engine.serialization import decoded, error_record, to_json
from durable.engine.vocab import StepResult
from durable.exceptions import CodecError, StepNotFound

if TYPE_CHECKING:
    from durable.engine.core import Engine


def execute_step(
    engine: Engine, run_id: str, seq: int, *, continue_turn: bool = True, trace: dict[str, str] | None = None
) -> StepResult:
    """Claim, run and settle step ``seq`` of ``run_id`` (``trace``: its dispatch's, else the run's); what happened."""
    engine.grants_here.begin(run_id, seq)
    store = engine.store
    now = engine.clock.now()
    lease = timedelta(seconds=engine.settings.step_execution_lease)
    claim = store.claim_step(run_id, seq, engine.owner, now, now + lease, engine.registry.step_timeout)
    if claim is None:
        # Nothing to run: settled, in flight elsewhere, not due yet, or the run is over.
        # A settled step may be a re-delivery whose resume got lost: re-drive it.
        if store.poke_if_settled(run_id, seq, now):
            _continue(engine, run_id, continue_turn)
        return StepResult.SKIPPED
    mine = ClaimCheck(engine.owner, claim.attempt)
    try:
        sd = engine.registry.get_step(claim.name)
        decoded(claim.input, f"the arguments of step {claim.name!r}")
    except (StepNotFound, CodecError) as exc:
        # No attempt can run: a retry would meet the same missing code or the same bytes.
        error = error_record(exc, code="codec_error" if isinstance(exc, CodecError) else "step_not_registered")
        error["retryable"] = False
        _settle(engine, run_id, seq, continue_turn, mine, claim.queue, error=error, namespace=claim.namespace)
        return StepResult.FAILED
    hold = engine.keeper.hold(
        engine.settings.step_execution_lease / 3,
        lambda: store.renew_step(run_id, seq, engine.owner, engine.clock.now() + lease),
        lambda: None,  # the step keeps running; its result is refused if a sweep counted it lost
    )
    args = claim.input or {}
    span = _begin(engine, claim, now, trace)
    try:
        with running(StepInfo(run_id, seq, claim.name, claim.attempt)):
            body = lambda: sd.fn(*args.get("args", []), **args.get("kwargs", {}))  # noqa: E731
            output = to_json(engine.faults.run(sd.name, body), f"result of step {sd.name!r}")
    except Exception as exc:  # noqa: BLE001 - any user error is a step failure
        span.fail(exc)
        err = error_record(exc)
        delay = retry_delay(sd, err, claim.attempt)
        if delay is not None:
            retry_at = engine.clock.now() + timedelta(seconds=delay)
            store.finish_step(run_id, seq, engine.clock.now(), error=err, retry_at=retry_at, claim=mine)
            if admission.limited(engine, claim.queue):
                # Its slot is free and it waits again: the sweep admits it once the retry is due.
                admission.admit_next(engine, [claim.queue])
            else:
                engine.transport.dispatch_step(run_id, seq, sd.route, delay=delay, namespace=claim.namespace)
            span.end(StepResult.RETRYING)
            return StepResult.RETRYING
        span.end(StepResult.FAILED)
        _settle(engine, run_id, seq, continue_turn, mine, claim.queue, error=err, namespace=claim.namespace)
        return StepResult.FAILED
    finally:
        hold.release()
    span.end(StepResult.COMPLETED)
    _settle(engine, run_id, seq, continue_turn, mine, claim.queue, output=output, namespace=claim.namespace)
    return StepResult.COMPLETED


def _begin(engine: Engine, claim: StepClaim, now: datetime, trace: dict[str, str] | None) -> Span:
    """The span of a dispatched step; ``queue_wait``: from when it was due to its claim."""
    if not engine.observer.enabled:
        return NOOP_SPAN
    attributes: dict[str, Any] = {
        "run_id": claim.run_id,
        "workflow": claim.workflow,
        "seq": claim.seq,
        "step": claim.name,
        "attempt": claim.attempt,
        "queue": claim.queue,
        "mode": observe.DISPATCHED,
    }
    if claim.ready_at is not None:
        attributes["queue_wait"] = max((now - claim.ready_at).total_seconds(), 0.0)
    return engine.observer.begin(observe.STEP, attributes, trace=trace or claim.trace_context)


def _settle(
    engine: Engine,
    run_id: str,
    seq: int,
    inline: bool,
    claim: ClaimCheck,
    queue: str | None,
    *,
    output: Any = None,
    error: dict[str, Any] | None = None,
    namespace: str | None = None,
) -> None:
    """Record the step's outcome and continue its run.

    Inline, the result write also takes the run's lease when it wakes it, and
    this worker runs the next turn at once (no wake write, no acquire, no
    hop). Otherwise the next turn is dispatched. A step of a limited queue
    freed its slot with that write: the next waiting step is admitted first.
    """
    now = engine.clock.now()
    read = admission.read_request(engine, queue)
    if inline:
        lease_until = now + timedelta(seconds=engine.settings.lease)
        run = engine.store.finish_step_and_acquire(
            run_id, seq, now, engine.owner, lease_until, output=output, error=error, claim=claim, admission=read
        )
        admission.after_result(engine, queue, read)
        if run is not None:
            turn.run_turn(engine, run_id, acquired=run)
        return
    woken = engine.store.finish_step(run_id, seq, now, output=output, error=error, claim=claim, admission=read)
    admission.after_result(engine, queue, read)
    if woken:
        engine.transport.dispatch_turn(run_id, namespace=namespace)


def _continue(engine: Engine, run_id: str, inline: bool) -> None:
    if inline:
        turn.run_turn(engine, run_id)
    else:
        engine.transport.dispatch_turn(run_id)
