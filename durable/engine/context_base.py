"""Plumbing shared by every ``ctx`` operation: positions, replay checks, suspension."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durable.engine.durations import Duration, parse_duration
from durable.engine.ports import CheckpointRecord, CheckpointWrite
from durable.engine.serialization import error_record, to_json
from durable.exceptions import Blocked, CancelRequested, NonDeterminismError, SignalTimeout, Suspend

if TYPE_CHECKING:
    from durable.engine.turn import Turn

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"

# Token prefixes of waiters that are not user signals (user signal names cannot use them).
RUN_TOKEN = "__run__:"
EVENT_TOKEN = "__event__:"
UPDATE_TOKEN = "__update__:"
# Checkpoint kinds whose pending state means the run has (or had) a waiter row.
WAIT_KINDS = ("signal", "update", "event", "child", "wait_run")


class ContextBase:
    """Position bookkeeping. Not thread-safe; valid only during the turn that created it."""

    def __init__(self, turn: Turn) -> None:
        self._turn = turn
        self._clock = turn.engine.clock
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
        """True while the next position was already recorded by an earlier turn."""
        return (self._seq + 1) in self._turn.checkpoints

    # -- plumbing ----------------------------------------------------------
    def _at_frontier(self) -> bool:
        """No position at or after the next one is recorded: the code is running new ground."""
        return self._turn.max_recorded_seq <= self._seq

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
            turn.nondeterminism = NonDeterminismError(
                f"run {self.run_id!r} position {seq}: the code asked for {kind} {name!r} "
                f"but the history recorded {cp.kind} {cp.name!r}. The workflow changed under "
                "a run in flight; guard the change with ctx.patched(...) or start a new version."
            )
            # Remembered on the turn: a user `except Exception` must not hide it.
            raise turn.nondeterminism
        if turn.cancel_pending and not turn.compensating and (cp is None or cp.status in (PENDING, RUNNING)):
            # cancel(compensate=True): stop at the first operation that has no outcome yet.
            # Its position stays taken if it was recorded (the undo steps go after it).
            if cp is None:
                self._seq -= 1
            raise CancelRequested()
        return seq, cp

    def _suspend(self, wake_at: datetime | None = None, *, event: bool = False) -> Suspend:
        self._turn.suspend(wake_at=wake_at, event=event)
        return Suspend()

    def _remember_undo(self, seq: int, name: str, undo: Any, call_input: Any, output: Any) -> None:
        """A completed step with an undo: register it for the saga (rebuilt the same way on replay)."""
        if undo is not None:
            from durable.engine.sagas import Compensation

            self._turn.compensations.append(Compensation(seq, name, undo, call_input, output))

    def _record(self, seq: int, name: str, kind: str, output: Any) -> None:
        now = self._clock.now()
        rec = CheckpointRecord(
            seq=seq, name=name, kind=kind, status=COMPLETED, output=output, started_at=now, finished_at=now
        )
        self._turn.defer(CheckpointWrite(rec, create=True))

    def _dispatch_step(self, seq: int, sd: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Write the pending checkpoint of a dispatched step and announce it after commit."""
        payload = to_json({"args": list(args), "kwargs": kwargs}, f"arguments of step {sd.name!r}")
        turn = self._turn
        # Checked before the pending write: a step nobody can run parks the run.
        if not turn._guard(lambda: turn.engine.fleet.can_serve(sd.name, sd.route)):
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
        now = self._clock.now()
        engine = turn.engine
        step_lease = engine.settings.step_lease
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
        turn.defer(CheckpointWrite(rec, create=True))
        run_id = self.run_id
        turn.after_commit(lambda: engine.transport.dispatch_step(run_id, seq, sd.route))

    def _wait_buffered(self, token: str, name: str, kind: str, timeout: Duration | None) -> Any:
        """Consume the oldest signal buffered under ``token``, or wait for one."""
        seq, cp = self._next(name, kind)
        if cp is not None and cp.status == COMPLETED:
            return cp.output
        if cp is not None and cp.status == FAILED:
            raise SignalTimeout(name, seq)
        turn = self._turn
        now = self._clock.now()
        got = turn.take_signal(token)
        if got is not None:
            signal_id, payload = got
            rec = CheckpointRecord(seq=seq, name=name, kind=kind, status=COMPLETED, output=payload, finished_at=now)
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
                kind=kind,
                status=FAILED,
                wake_at=deadline,
                finished_at=now,
                error=error_record(SignalTimeout(name, seq), code="signal_timeout", retryable=False),
            )
            turn.defer(CheckpointWrite(rec, create=cp is None, expect=(PENDING,)))
            raise SignalTimeout(name, seq)
        if cp is None:
            rec = CheckpointRecord(seq=seq, name=name, kind=kind, status=PENDING, wake_at=deadline, started_at=now)
            turn.defer(CheckpointWrite(rec, create=True))
        turn.wait_on(token, seq)
        raise self._suspend(deadline, event=True)
