"""Execution of dispatched steps on a worker.

A step is claimed (``pending`` → ``running``, one attempt counted) before it
runs and settled with compare-and-set on ``pending``/``running``, so:

* a duplicate or late delivery of the same step id finds nothing to claim;
* a settled checkpoint always wins over a re-dispatch (the first outcome is kept);
* a result for a cancelled or completed run is dropped; a late result for a
  failed run is kept for a later requeue but does not resume it.

The worker that settles a step continues the run's next turn itself, saving a
round trip through the broker.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durable.engine.serialization import error_record, to_json
from durable.exceptions import StepNotFound

if TYPE_CHECKING:
    from durable.engine.core import Engine

logger = logging.getLogger("durable.steps")


@dataclass(frozen=True)
class StepInfo:
    """What a running step knows about itself (see :func:`durable.current_step`)."""

    run_id: str
    seq: int
    name: str
    attempt: int

    @property
    def step_id(self) -> str:
        """Stable across attempts and re-deliveries: use it as an idempotency key."""
        return f"{self.run_id}:{self.seq}"


_current: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar("durable_step", default=None)
_last_beat: contextvars.ContextVar[datetime | None] = contextvars.ContextVar("durable_step_beat", default=None)


def current_step() -> StepInfo | None:
    """The step being executed in this thread, or None outside a dispatched step."""
    return _current.get()


def heartbeat(engine: Engine, progress: Any = None) -> bool:
    """Record that the current step is alive (and its progress); throttled; never raises.

    Returns True when a heartbeat was written.
    """
    info = _current.get()
    if info is None:
        return False
    now = engine.clock.now()
    last = _last_beat.get()
    if last is not None and (now - last).total_seconds() < engine.settings.heartbeat_interval:
        return False
    try:
        payload = to_json(progress, "heartbeat progress", max_bytes=64 * 1024)
        lease_until = now + timedelta(seconds=engine.settings.step_execution_lease)
        engine.store.heartbeat_step(info.run_id, info.seq, now, payload, lease_until)
        _last_beat.set(now)
        return True
    except Exception:
        logger.warning("heartbeat for %s:%s not recorded", info.run_id, info.seq, exc_info=True)
        return False


@contextlib.contextmanager
def running(info: StepInfo) -> Iterator[None]:
    """Make ``info`` what :func:`current_step` returns while a step function runs."""
    token = _current.set(info)
    beat_token = _last_beat.set(None)
    try:
        yield
    finally:
        _current.reset(token)
        _last_beat.reset(beat_token)


def execute_step(engine: Engine, run_id: str, seq: int, *, continue_turn: bool = True) -> str:
    """Claim, run and settle step ``seq`` of ``run_id``. Returns what happened."""
    store = engine.store
    now = engine.clock.now()
    lease = timedelta(seconds=engine.settings.step_execution_lease)
    claim = store.claim_step(run_id, seq, engine.owner, now, now + lease, engine.registry.step_timeout)
    if claim is None:
        # Nothing to run: settled, in flight elsewhere, not due yet, or the run is over.
        # A settled step may be a re-delivery whose resume got lost: re-drive it.
        if store.poke_if_settled(run_id, seq, now):
            _continue(engine, run_id, continue_turn)
        return "skipped"
    try:
        sd = engine.registry.get_step(claim.name)
    except StepNotFound as exc:
        error = error_record(exc, code="step_not_registered", retryable=False)
        _settle(engine, run_id, seq, continue_turn, error=error)
        return "failed"

    hold = engine.keeper.hold(
        engine.settings.step_execution_lease / 3,
        lambda: store.renew_step(run_id, seq, engine.owner, engine.clock.now() + lease),
        lambda: None,  # the step keeps running; its result is still accepted if unsettled
    )
    args = claim.input or {}
    try:
        with running(StepInfo(run_id, seq, claim.name, claim.attempt)):
            output = to_json(sd.fn(*args.get("args", []), **args.get("kwargs", {})), f"result of step {sd.name!r}")
    except Exception as exc:  # noqa: BLE001 - any user error is a step failure
        err = error_record(exc)
        delay = retry_delay(sd, err, claim.attempt)
        if delay is not None:
            store.finish_step(
                run_id, seq, engine.clock.now(), error=err, retry_at=engine.clock.now() + timedelta(seconds=delay)
            )
            engine.transport.dispatch_step(run_id, seq, sd.route, delay=delay)
            return "retrying"
        _settle(engine, run_id, seq, continue_turn, error=err)
        return "failed"
    finally:
        hold.release()
    _settle(engine, run_id, seq, continue_turn, output=output)
    return "completed"


def retry_delay(sd: Any, error: dict[str, Any], attempt: int) -> float | None:
    """Seconds until the next attempt of a step whose ``attempt`` failed with ``error``; None: no retry."""
    if error["retryable"] and attempt <= sd.retries:
        delay: float = sd.backoff.delay(attempt)
        return delay
    return None


def _settle(
    engine: Engine, run_id: str, seq: int, inline: bool, *, output: Any = None, error: dict[str, Any] | None = None
) -> None:
    """Record the step's outcome and continue its run.

    Inline, the result write also takes the run's lease when it wakes it, and
    this worker runs the next turn at once (no wake write, no acquire, no
    hop). Otherwise the next turn is dispatched.
    """
    now = engine.clock.now()
    if inline:
        lease_until = now + timedelta(seconds=engine.settings.lease)
        run = engine.store.finish_step_and_acquire(
            run_id, seq, now, engine.owner, lease_until, output=output, error=error
        )
        if run is not None:
            engine.run_turn(run_id, acquired=run)
    elif engine.store.finish_step(run_id, seq, now, output=output, error=error):
        engine.transport.dispatch_turn(run_id)


def _continue(engine: Engine, run_id: str, inline: bool) -> None:
    if inline:
        engine.run_turn(run_id)
    else:
        engine.transport.dispatch_turn(run_id)
