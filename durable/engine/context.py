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
from typing import TYPE_CHECKING, Any

from durable.engine import clock
from durable.engine.durations import Duration, parse_duration
from durable.engine.ports import CheckpointRecord, CheckpointWrite
from durable.engine.registry import resolve_step
from durable.engine.retry import BackoffSpec, check_retries, make_backoff
from durable.engine.serialization import error_record, to_json
from durable.exceptions import (
    Blocked,
    InvalidInput,
    NonDeterminismError,
    SignalTimeout,
    StepFailed,
    Suspend,
)

if TYPE_CHECKING:
    from durable.engine.turn import Turn

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"


class WorkflowContext:
    """Passed as the first argument of every workflow function.

    Not thread-safe and only valid during the turn that created it.
    """

    def __init__(self, turn: Turn) -> None:
        self._turn = turn
        self._seq = 0

    # -- identity ----------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._turn.run.id

    @property
    def workflow(self) -> str:
        return self._turn.run.workflow

    @property
    def version(self) -> int:
        return self._turn.run.version

    @property
    def namespace(self) -> str:
        return self._turn.run.namespace

    @property
    def input(self) -> Any:
        return self._turn.run.input

    @property
    def is_replaying(self) -> bool:
        """True while the current position was already recorded by an earlier turn."""
        return (self._seq + 1) in self._turn.checkpoints

    # -- plumbing ----------------------------------------------------------
    def _next(self, name: str, kind: str) -> tuple[int, CheckpointRecord | None]:
        turn = self._turn
        if turn.suspended:
            # User code caught Suspend with a bare except; do not let it go on.
            raise Suspend()
        turn.check_lease()
        self._seq += 1
        seq = self._seq
        cp = turn.checkpoints.get(seq)
        if cp is not None and (cp.name != name or cp.kind != kind):
            raise NonDeterminismError(
                f"run {self.run_id!r} position {seq}: the code asked for {kind} {name!r} "
                f"but the history recorded {cp.kind} {cp.name!r}. The workflow changed under "
                "a run in flight; guard the change with ctx.patched(...) or start a new version."
            )
        return seq, cp

    def _suspend(self, wake_at: datetime | None = None, *, event: bool = False) -> Suspend:
        self._turn.suspend(wake_at=wake_at, event=event)
        return Suspend()

    def _record(self, seq: int, name: str, kind: str, output: Any) -> None:
        now = clock.now()
        rec = CheckpointRecord(
            seq=seq, name=name, kind=kind, status=COMPLETED, output=output, started_at=now, finished_at=now
        )
        self._turn.defer(CheckpointWrite(rec, create=True))

    # -- recorded values ---------------------------------------------------
    def now(self) -> datetime:
        """The current time, recorded on first execution and replayed after."""
        seq, cp = self._next("now", "now")
        if cp is not None:
            return datetime.fromisoformat(cp.output)
        value = clock.now().astimezone(UTC)
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
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` in this process, once, and record its JSON result.

        A failing call is retried ``retries`` times with ``backoff`` (each retry is
        a durable timer, so it survives a restart); a :class:`~durable.FatalError`
        stops at once. When retries are spent the workflow gets
        :class:`~durable.StepFailed` here. The result is committed (one commit)
        before the next operation; a crash between the call and the commit runs
        it again (at-least-once; dedupe on ``ctx.step_id``-style keys if needed).
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("local_step needs a non-empty name")
        if not callable(fn):
            raise InvalidInput(f"local_step {name!r}: {fn!r} is not callable")
        retries = check_retries(retries)
        policy = make_backoff(backoff)
        seq, cp = self._next(name, "local")
        attempts = 0
        if cp is not None:
            if cp.status == COMPLETED:
                return cp.output
            if cp.status == FAILED:
                raise StepFailed(name, seq, cp.error or {}, cp.attempts)
            if cp.wake_at is not None and cp.wake_at > clock.now():
                raise self._suspend(cp.wake_at)
            attempts = cp.attempts
        turn = self._turn
        # Values recorded so far in this turn must be durable before a side effect uses them.
        turn.flush()
        attempt = attempts + 1
        started = clock.now()
        try:
            value = to_json(fn(*args, **kwargs), f"local_step {name!r} result")
        except Exception as exc:
            err = error_record(exc)
            if err["retryable"] and attempt <= retries:
                retry_at = clock.now() + timedelta(seconds=policy.delay(attempt))
                rec = CheckpointRecord(
                    seq=seq,
                    name=name,
                    kind="local",
                    status=PENDING,
                    error=err,
                    attempts=attempt,
                    wake_at=retry_at,
                    started_at=started,
                )
                turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
                turn.flush()
                raise self._suspend(retry_at) from None
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="local",
                status=FAILED,
                error=err,
                attempts=attempt,
                started_at=started,
                finished_at=clock.now(),
            )
            turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
            turn.flush()
            raise StepFailed(name, seq, err, attempt) from exc
        rec = CheckpointRecord(
            seq=seq,
            name=name,
            kind="local",
            status=COMPLETED,
            output=value,
            attempts=attempt,
            started_at=started,
            finished_at=clock.now(),
        )
        turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
        turn.flush()
        return value

    def step(self, step: Any, *args: Any, **kwargs: Any) -> Any:
        """Dispatch a registered step to a worker and return its result.

        The first time, a ``pending`` checkpoint is written and the step is
        dispatched after that commit; the run suspends. When the result lands,
        any worker resumes the run and this call returns the recorded output (or
        raises :class:`~durable.StepFailed`). Arguments must be JSON.
        """
        sd = resolve_step(step)
        seq, cp = self._next(sd.name, "step")
        if cp is not None:
            if cp.status == COMPLETED:
                return cp.output
            if cp.status == FAILED:
                raise StepFailed(sd.name, seq, cp.error or {}, cp.attempts)
            raise self._suspend(event=True)
        payload = to_json({"args": list(args), "kwargs": kwargs}, f"arguments of step {sd.name!r}")
        # Checked before the pending write: a step nobody can run parks the run.
        if not self._turn.engine.fleet.can_serve(sd.name, sd.route):
            raise Blocked(
                {
                    "message": f"no live worker serves step {sd.name!r} on queue {sd.route or 'default'!r}",
                    "code": "no_capable_worker",
                    "retryable": True,
                    "type": "Blocked",
                    "traceback": None,
                    "step": sd.name,
                    "queue": sd.route,
                }
            )
        now = clock.now()
        step_lease = self._turn.engine.settings.step_lease
        rec = CheckpointRecord(
            seq=seq,
            name=sd.name,
            kind="step",
            status=PENDING,
            input=payload,
            queue=sd.route,
            enqueued_at=now,
            # With lost-dispatch self-heal on, a sweep re-dispatches the step if no
            # worker has taken it by then.
            wake_at=now + timedelta(seconds=step_lease) if step_lease else None,
        )
        turn = self._turn
        turn.defer(CheckpointWrite(rec, create=True))
        turn.after_commit(lambda: turn.engine.transport.dispatch_step(self.run_id, seq, sd.route))
        raise self._suspend(event=True)

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
        now = clock.now()
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
        if not isinstance(name, str) or not name:
            raise InvalidInput("wait_signal needs a non-empty signal name")
        seq, cp = self._next(name, "signal")
        if cp is not None and cp.status == COMPLETED:
            return cp.output
        if cp is not None and cp.status == FAILED:
            raise SignalTimeout(name, seq)
        turn = self._turn
        now = clock.now()
        got = turn.take_signal(name)
        if got is not None:
            signal_id, payload = got
            rec = CheckpointRecord(seq=seq, name=name, kind="signal", status=COMPLETED, output=payload, finished_at=now)
            turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
            turn.writes.consumed_signals.append(signal_id)
            return payload
        deadline = cp.wake_at if cp is not None else None
        if cp is None and timeout is not None:
            deadline = now + parse_duration(timeout)
        if deadline is not None and deadline <= now:
            rec = CheckpointRecord(
                seq=seq,
                name=name,
                kind="signal",
                status=FAILED,
                wake_at=deadline,
                finished_at=now,
                error=error_record(SignalTimeout(name, seq), code="signal_timeout", retryable=False),
            )
            turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
            raise SignalTimeout(name, seq)
        if cp is None:
            rec = CheckpointRecord(seq=seq, name=name, kind="signal", status=PENDING, wake_at=deadline, started_at=now)
            turn.defer(CheckpointWrite(rec, create=True))
        turn.waiters.append((name, seq))
        raise self._suspend(deadline, event=True)
