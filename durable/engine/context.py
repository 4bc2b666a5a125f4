"""``ctx``: the durable operations a workflow function calls.

Every operation takes the next position (``seq``) of the run's history. On
replay, a position that already holds a settled checkpoint returns its recorded
value without doing anything; a position that holds a *different* operation
raises :class:`~durable.NonDeterminismError`. An operation that cannot finish
now (a step in flight, a timer not yet due, a signal not yet sent) raises the
internal ``Suspend``, which ends the turn; the run resumes by replaying from
the top.

Rules for workflow code, which follow from replay: do all I/O in steps; read
time, randomness and ids through ``ctx.now()``, ``ctx.uuid()`` and
``ctx.side_effect()``; never catch ``BaseException`` around ``ctx`` calls.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.engine.composition import CompositionOps
from durable.engine.context_base import COMPLETED, FAILED, PENDING, RUNNING, ContextBase
from durable.engine.durations import Duration, parse_duration
from durable.engine.execution import StepInfo, retry_delay, running
from durable.engine.ports import CheckpointRecord, CheckpointWrite
from durable.engine.retry import BackoffSpec, check_retries, make_backoff
from durable.engine.serialization import error_record, to_json
from durable.exceptions import InvalidInput, StepFailed


def _call_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The JSON record of a call's arguments, or None when they are not JSON."""
    try:
        return to_json({"args": list(args), "kwargs": kwargs})
    except InvalidInput:
        return None


class WorkflowContext(CompositionOps, ContextBase):
    """Passed as the first argument of every workflow function.

    Not thread-safe and only valid during the turn that created it.
    """

    # -- recorded values ---------------------------------------------------
    def now(self) -> datetime:
        """The current time, recorded on first execution and replayed after."""
        seq, cp = self._next("now", "now")
        if cp is not None:
            return datetime.fromisoformat(cp.output)
        value = self._clock.now().astimezone(UTC)
        self._record(seq, "now", "now", value.isoformat())
        return value

    def uuid(self) -> str:
        """A random UUID (string), recorded once."""
        seq, cp = self._next("uuid", "uuid")
        if cp is not None:
            return str(cp.output)
        value = str(uuid_module.uuid4())
        self._record(seq, "uuid", "uuid", value)
        return value

    def side_effect(self, fn: Callable[[], Any], *, name: str = "side_effect") -> Any:
        """Call ``fn()`` once; its (JSON) result is recorded and replayed.

        Use it for small non-deterministic reads (a random choice, a config
        value). The value is committed before the workflow goes on.
        """
        seq, cp = self._next(name, "side_effect")
        if cp is not None:
            return cp.output
        value = to_json(fn(), f"side_effect {name!r} result")
        self._record(seq, name, "side_effect", value)
        self._turn.flush()
        return value

    # -- steps -------------------------------------------------------------
    def local_step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retries: int = 0,
        backoff: BackoffSpec = None,
        compensate: Callable[[Any, Any], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` in this process, once, and record its JSON result.

        A failing call is retried ``retries`` times with ``backoff`` (each retry is
        a durable timer, so it survives a restart); a :class:`~durable.FatalError`
        stops at once. When retries are spent the workflow gets
        :class:`~durable.StepFailed` here. The result is committed (one commit)
        before the next operation; a crash between the call and the commit runs
        it again (at-least-once; the record rides with the next commit, which
        precedes any further side effect). ``compensate(input, output)`` undoes it if the
        run later fails (a saga); ``input`` is ``{"args": [...], "kwargs": {...}}``.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("local_step needs a non-empty name")
        if not callable(fn):
            raise InvalidInput(f"local_step {name!r}: {fn!r} is not callable")
        if compensate is not None and not callable(compensate):
            raise InvalidInput(f"local_step {name!r}: compensate must be callable")
        retries = check_retries(retries)
        policy = make_backoff(backoff)
        seq, cp = self._next(name, "local")
        call_input = _call_input(args, kwargs)
        attempts = 0
        if cp is not None:
            if cp.status == COMPLETED:
                self._remember_undo(seq, name, compensate, call_input, cp.output)
                return cp.output
            if cp.status == FAILED:
                raise StepFailed(name, seq, cp.error or {}, cp.attempts)
            if cp.wake_at is not None and cp.wake_at > self._clock.now():
                raise self._suspend(cp.wake_at)
            attempts = cp.attempts
        turn = self._turn
        # Values recorded so far in this turn must be durable before a side effect uses them,
        # and the run must still be ours (not cancelled meanwhile).
        turn.confirm_lease()
        attempt = attempts + 1
        started = self._clock.now()
        try:
            value = to_json(fn(*args, **kwargs), f"local_step {name!r} result")
        except Exception as exc:
            err = error_record(exc)
            if err["retryable"] and attempt <= retries:
                retry_at = self._clock.now() + timedelta(seconds=policy.delay(attempt))
                rec = CheckpointRecord(
                    seq=seq,
                    name=name,
                    kind="local",
                    status=PENDING,
                    input=call_input,
                    error=err,
                    attempts=attempt,
                    wake_at=retry_at,
                    started_at=started,
                )
                turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
                raise self._suspend(retry_at) from None
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="local",
                status=FAILED,
                input=call_input,
                error=err,
                attempts=attempt,
                started_at=started,
                finished_at=self._clock.now(),
            )
            turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
            turn.flush()
            raise StepFailed(name, seq, err, attempt) from exc
        rec = CheckpointRecord(
            seq=seq,
            name=name,
            kind="local",
            status=COMPLETED,
            input=call_input,
            output=value,
            attempts=attempt,
            started_at=started,
            finished_at=self._clock.now(),
        )
        # Not committed yet: it rides with the next commit, which always comes before the
        # next side effect (the flush above the next step) or ends the turn. One commit per step.
        turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
        self._remember_undo(seq, name, compensate, call_input, value)
        return value

    def step(self, step: Any, *args: Any, compensate: Any = None, **kwargs: Any) -> Any:
        """Dispatch a registered step to a worker and return its result.

        The first time, a ``pending`` checkpoint is written and the step is
        dispatched after that commit; the run suspends. When the result lands,
        any worker resumes the run and this call returns the recorded output (or
        raises :class:`~durable.StepFailed`). Arguments must be JSON.
        ``compensate`` (a step or a function of ``(input, output)``; default:
        the step's own ``compensate=``) undoes it if the run later fails.
        ``compensate`` is therefore a reserved keyword for step arguments.
        """
        sd = self._turn.engine.registry.resolve_step(step)
        undo = compensate if compensate is not None else sd.compensate
        seq, cp = self._next(sd.name, "step")
        if cp is not None:
            if cp.status == COMPLETED:
                self._remember_undo(seq, sd.name, undo, cp.input, cp.output)
                return cp.output
            if cp.status == FAILED:
                raise StepFailed(sd.name, seq, cp.error or {}, cp.attempts)
            self._turn.step_seqs.append(seq)
            raise self._suspend(event=True)
        engine = self._turn.engine
        if engine.settings.eager_steps and sd.route in engine.eager_routes and not sd.timeout:
            return self._run_here(seq, sd, args, kwargs, undo)
        self._dispatch_step(seq, sd, args, kwargs)
        raise self._suspend(event=True)

    def _run_here(self, seq: int, sd: Any, args: tuple[Any, ...], kwargs: dict[str, Any], undo: Any) -> Any:
        """Run a dispatched step in this worker, during the turn (``EAGER_STEPS``).

        This process consumes the step's queue, so the broker round trip, the
        separate claim and the wake would only hand the step to a process like
        this one. The claim is still durable before the step runs (it rides
        with the commit that flushes what the turn recorded so far), with the
        usual execution lease, so attempts count executions exactly and a
        worker lost mid-step is recovered by the expired-step sweep. The result
        settles that claim in the next commit, which fails as a whole if the
        claim was taken away meanwhile. One commit per step, as a local step.
        A retryable failure with retries left goes back to the broker.
        """
        payload = to_json({"args": list(args), "kwargs": kwargs}, f"arguments of step {sd.name!r}")
        turn = self._turn
        engine = turn.engine
        owner = engine.owner
        lease = timedelta(seconds=engine.settings.step_execution_lease)
        started = self._clock.now()

        def record(status: str, **fields: Any) -> CheckpointRecord:
            return CheckpointRecord(
                seq=seq,
                name=sd.name,
                kind="step",
                status=status,
                input=payload,
                queue=sd.route,
                enqueued_at=started,
                started_at=started,
                attempts=1,
                **fields,
            )

        def settle(rec: CheckpointRecord) -> None:
            turn.defer(CheckpointWrite(rec, create=False, expect=(RUNNING,), claimed_by=owner))

        turn.defer(CheckpointWrite(record(RUNNING, locked_by=owner, wake_at=started + lease), create=True))
        turn.flush()
        run_id = self.run_id
        hold = engine.keeper.hold(
            lease.total_seconds() / 3,
            lambda: engine.store.renew_step(run_id, seq, owner, self._clock.now() + lease),
            lambda: None,  # the commit that settles it finds out
        )
        try:
            with running(StepInfo(run_id, seq, sd.name, 1)):
                output = to_json(sd.fn(*args, **kwargs), f"result of step {sd.name!r}")
        except Exception as exc:
            err = error_record(exc)
            delay = retry_delay(sd, err, 1)
            if delay is not None:
                retry_at = self._clock.now() + timedelta(seconds=delay)
                settle(record(PENDING, error=err, retry_at=retry_at, wake_at=retry_at))
                turn.after_commit(lambda: engine.transport.dispatch_step(run_id, seq, sd.route, delay=delay))
                raise self._suspend(event=True) from None
            settle(record(FAILED, error=err, finished_at=self._clock.now()))
            turn.flush()
            raise StepFailed(sd.name, seq, err, 1) from exc
        finally:
            hold.release()
        settle(record(COMPLETED, output=output, finished_at=self._clock.now()))
        self._remember_undo(seq, sd.name, undo, payload, output)
        return output

    # -- timers ------------------------------------------------------------
    def sleep(self, duration: Duration) -> None:
        """Suspend the run for ``duration`` ("30s", "2h", "7d", seconds, timedelta)."""
        delta = parse_duration(duration)
        self._sleep("sleep", lambda now: now + delta)

    def sleep_until(self, when: datetime) -> None:
        """Suspend the run until ``when`` (an aware datetime)."""
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise InvalidInput("sleep_until needs a timezone-aware datetime")
        self._sleep("sleep_until", lambda now: when)

    def _sleep(self, name: str, due: Callable[[datetime], datetime]) -> None:
        seq, cp = self._next(name, "sleep")
        now = self._clock.now()
        if cp is None:
            wake_at = due(now)
            if wake_at <= now:
                self._record(seq, name, "sleep", None)
                return
            rec = CheckpointRecord(seq=seq, name=name, kind="sleep", status=PENDING, wake_at=wake_at, started_at=now)
            self._turn.defer(CheckpointWrite(rec, create=True))
            raise self._suspend(wake_at)
        if cp.status == COMPLETED:
            return
        assert cp.wake_at is not None
        if cp.wake_at > now:
            raise self._suspend(cp.wake_at)
        rec = CheckpointRecord(seq=seq, name=name, kind="sleep", status=COMPLETED, wake_at=cp.wake_at, finished_at=now)
        self._turn.defer(CheckpointWrite(rec, create=False, expect=(PENDING,)))

    # -- signals -----------------------------------------------------------
    def wait_signal(self, name: str, timeout: Duration | None = None) -> Any:
        """Wait for ``durable.signal(run_id, name, payload)`` and return the payload.

        Signals sent before the wait are buffered and consumed in order, one per
        wait. With ``timeout``, raises :class:`~durable.SignalTimeout` when it
        expires first.
        """
        if not isinstance(name, str) or not name or name.startswith("__"):
            raise InvalidInput("wait_signal needs a non-empty signal name not starting with '__'")
        return self._wait_buffered(name, name, "signal", timeout)
