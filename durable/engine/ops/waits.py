"""Waiting operations of ``ctx``: timers, signals, updates, named events and other runs.

Each wait records a ``pending`` checkpoint and registers a waiter with the
turn's final commit; the sender takes the waiter, then buffers, then retakes
(and the waiting side registers, then rechecks), which closes the lost-wake
race. A deadline is a durable timer: the run wakes by it even if no sender
ever comes, and the wait then fails with :class:`~durable.SignalTimeout`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from durable.engine.durations import Duration, parse_duration
from durable.engine.history import COMPLETED, FAILED
from durable.engine.ops.base import OpsBase
from durable.engine.ports import CheckpointRecord
from durable.engine.serialization import error_record, to_json
from durable.engine.vocab import EVENT_TOKEN, RUN_TOKEN, SETTLED, UPDATE_TOKEN, CheckpointKind, RunStatus
from durable.exceptions import InvalidInput, RunFailed, RunNotFound, SignalTimeout

SETTLED_OK = (RunStatus.COMPLETED,)
SETTLED_BAD = (RunStatus.FAILED, RunStatus.DEAD, RunStatus.CANCELLED)
Settled = tuple[Literal["done", "failed", "pending"], Any]


@dataclass(frozen=True)
class _Wait:
    """A wait at ``seq`` on ``token``; ``timeout_code`` is the error code when its deadline passes."""

    seq: int
    name: str
    kind: str
    token: str
    timeout_code: str
    match: dict[str, Any] | None = None
    # The exception a timeout raises (and records), from the wait's name and position.
    timeout_error: Callable[[str, int], Exception] = SignalTimeout


def _replayed(seq: int, cp: CheckpointRecord, timeout: Callable[[str, int], Exception] = SignalTimeout) -> Any:
    """A settled wait replays its value, or its timeout."""
    if cp.status == FAILED:
        raise timeout(cp.name, seq)
    return cp.output


class WaitOps(OpsBase):
    # -- timers --------------------------------------------------------------
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
        kind = CheckpointKind.SLEEP
        seq, cp = self._next(name, kind)
        now = self._clock.now()
        port, history = self._port, self._history
        if cp is None:
            wake_at = due(now)
            if wake_at <= now:
                port.defer(history.recorded(seq, name, kind, None))
                return
            port.defer(history.pending(seq, name, kind, wake_at=wake_at, started_at=now))
            cp = self._sleep_until(seq, wake_at)
        # Parked, this goes on in the turn that resumed the workflow, as a replay would.
        while cp.status != COMPLETED:
            assert cp.wake_at is not None
            now = self._clock.now()
            if cp.wake_at <= now:
                self._port.defer(self._history.completed(seq, name, kind, wake_at=cp.wake_at, finished_at=now))
                return
            cp = self._sleep_until(seq, cp.wake_at)

    def _sleep_until(self, seq: int, wake_at: datetime) -> CheckpointRecord:
        """The timer at ``seq`` is not due: wake by ``wake_at``; parks or raises Suspend (:meth:`_stay`)."""
        may_park = self._may_park()
        self._port.suspend(wake_at, event=False)
        return self._stay(seq, may_park)

    # -- signals and updates -------------------------------------------------
    def wait_signal(self, name: str, timeout: Duration | None = None) -> Any:
        """Wait for ``durable.signal(run_id, name, payload)`` and return the payload.

        Signals sent before the wait are buffered and consumed in order, one per
        wait. With ``timeout``, raises :class:`~durable.SignalTimeout` when it
        expires first.
        """
        if not isinstance(name, str) or not name or name.startswith("__"):
            raise InvalidInput("wait_signal needs a non-empty signal name not starting with '__'")
        return self._wait_buffered(name, name, CheckpointKind.SIGNAL, timeout)

    def wait_update(self, name: str, timeout: Duration | None = None) -> Any:
        """Wait for an accepted ``durable.update(run_id, name, arg)`` and return its argument.

        Updates are validated in the caller by the validator declared with
        ``@durable.workflow(updates={name: validator})``; only accepted ones
        arrive here, in order.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("wait_update needs a non-empty update name")
        return self._wait_buffered(UPDATE_TOKEN + name, name, CheckpointKind.UPDATE, timeout)

    def _wait_buffered(
        self, token: str, name: str, kind: str, timeout: Duration | None, *, deadline: datetime | None = None, **on: Any
    ) -> Any:
        """Consume the oldest signal buffered under ``token``, or wait for one.

        The wait times out ``timeout`` after it first waits, or at ``deadline``
        if given (fixed earlier, by the caller); ``on`` overrides the timeout's
        ``timeout_code`` and ``timeout_error`` of :class:`_Wait`.
        """
        seq, cp = self._next(name, kind)
        wait = _Wait(seq, name, kind, token, on.pop("timeout_code", "signal_timeout"), **on)
        # Parked, this loop goes on in the turn that resumed the workflow, as a replay would.
        while True:
            if cp is not None and cp.status in SETTLED:
                return _replayed(seq, cp, wait.timeout_error)
            port = self._port
            now = self._clock.now()
            got = port.take_signal(token)
            if got is not None:
                signal_id, payload = got
                port.defer(self._history.completed(seq, name, kind, create=cp is None, output=payload, finished_at=now))
                port.consume_signal(signal_id)
                return payload
            if cp is not None:
                deadline = cp.wake_at
            elif timeout is not None:
                deadline = now + parse_duration(timeout)
            cp = self._park(wait, cp, deadline, now)

    # -- named events ----------------------------------------------------------
    def wait_event(self, name: str, match: dict[str, Any] | None = None, timeout: Duration | None = None) -> Any:
        """Wait for ``durable.publish_event(name, payload)`` with ``match`` ⊆ payload.

        An event published before anyone waited is buffered once and taken by
        the first waiter it matches. Raises :class:`~durable.SignalTimeout` when
        ``timeout`` expires first.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput("wait_event needs a non-empty event name")
        if match is not None:
            match = to_json(match, "event match")
            if not isinstance(match, dict):
                raise InvalidInput("wait_event match must be a dict")
        kind = CheckpointKind.EVENT
        seq, cp = self._next(name, kind)
        if cp is not None and cp.status in SETTLED:
            return _replayed(seq, cp)
        now = self._clock.now()
        deadline = cp.wake_at if cp is not None else (now + parse_duration(timeout) if timeout is not None else None)
        # Parked, this loop goes on in the turn that resumed the workflow, as a replay would.
        while True:
            if cp is not None and cp.status in SETTLED:
                return _replayed(seq, cp)
            history = self._history
            got = self._port.take_event(seq, name, match, deadline, create=cp is None)
            if got is not None:
                history.remember(history.event_taken(seq, name, got[0]))
                return got[0]
            cp = self._park(_Wait(seq, name, kind, EVENT_TOKEN + name, "event_timeout", match), cp, deadline, now)
            now = self._clock.now()

    def _park(
        self, wait: _Wait, cp: CheckpointRecord | None, deadline: datetime | None, now: datetime
    ) -> CheckpointRecord:
        """Nothing arrived for ``wait``: time it out if its deadline passed, else wait on it.

        Parks the workflow or raises Suspend; once resumed, returns what its
        position holds now (:meth:`_stay`).
        """
        may_park = self._may_park()
        port, history = self._port, self._history
        seq, name, kind = wait.seq, wait.name, wait.kind
        if deadline is not None and deadline <= now:
            error = error_record(wait.timeout_error(name, seq), code=wait.timeout_code, retryable=False)
            port.defer(history.failed(seq, name, kind, error, create=cp is None, wake_at=deadline, finished_at=now))
            raise wait.timeout_error(name, seq)
        if cp is None:
            # An event wait records what it matches on; a signal or update wait has no input.
            fields: dict[str, Any] = {"input": {"match": wait.match}} if kind == CheckpointKind.EVENT else {}
            port.defer(history.pending(seq, name, kind, wake_at=deadline, started_at=now, **fields))
        port.wait_on(wait.token, seq, wait.match)
        port.suspend(deadline, event=True)
        return self._stay(seq, may_park)

    # -- other runs ------------------------------------------------------------
    def wait_for_run(self, run_id: str) -> Any:
        """Wait for any run to settle and return its output (follows continue-as-new).

        Raises :class:`~durable.RunFailed` if it fails or is cancelled, and
        :class:`~durable.RunNotFound` if there is no such run.
        """
        if not isinstance(run_id, str) or not run_id:
            raise InvalidInput("wait_for_run needs a run id")
        kind = CheckpointKind.WAIT_RUN
        seq, cp = self._next(run_id, kind)
        if cp is not None and cp.status == COMPLETED:
            return cp.output
        if cp is not None and cp.status == FAILED:
            raise RunFailed(run_id, (cp.error or {}).get("child_status", RunStatus.FAILED), cp.error)
        if cp is None:
            self._port.defer(self._history.pending(seq, run_id, kind, input={"run_id": run_id}))
        state, value = self._settled(seq, run_id, kind, run_id)
        if state == "done":
            return value
        if state == "failed":
            raise RunFailed(run_id, value.get("child_status", RunStatus.FAILED), value)
        raise self._suspend(event=True)

    def _settled(self, seq: int, name: str, kind: str, run_id: str) -> Settled:
        """Look at the run a pending checkpoint waits for; record its outcome once it has one."""
        port = self._port
        if port.creating(run_id):
            # Started in this very turn: it exists once this turn commits, and cannot be done yet.
            port.wait_on(RUN_TOKEN + run_id, seq)
            return "pending", run_id
        final = port.resolve_run(run_id)
        if final is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if final.status in SETTLED_OK:
            port.defer(self._history.completed(seq, name, kind, output=final.output))
            return "done", final.output
        if final.status in SETTLED_BAD:
            error = dict(final.error or {"message": f"run {final.id!r} was {final.status}"})
            error["child_status"] = final.status
            error.setdefault("code", f"run_{final.status}")
            port.defer(self._history.failed(seq, name, kind, error))
            return "failed", error
        port.wait_on(RUN_TOKEN + final.id, seq)
        return "pending", final.id
