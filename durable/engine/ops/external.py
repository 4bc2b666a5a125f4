"""Operations completed from outside the run: a third party's callback, an operator's breakpoint.

``wait_for_callback`` takes a position and records the callback ``pending``
(committed at once, so its URL can be handed out); its token is derived from
the run id and that position, so replay makes the same one without storing
it. ``durable.complete_callback`` settles that checkpoint and buffers the
payload as a signal under the token (the signal machinery's race-free
buffering and waking), which ``Callback.wait()`` consumes at a position of its
own. ``breakpoint`` records a pending checkpoint that
``durable.resume_breakpoint`` settles, then wakes the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable.engine import callbacks
from durable.engine.durations import Duration, parse_duration
from durable.engine.history import COMPLETED
from durable.engine.ops.waits import WaitOps
from durable.engine.vocab import CALLBACK_TOKEN, CheckpointKind
from durable.exceptions import CallbackFailed, CallbackTimeout, InvalidInput

CALLBACK = CheckpointKind.CALLBACK


@dataclass
class Callback:
    """A callback a third party completes: hand it ``url`` (or ``token``), then ``wait()`` for its payload.

    ``token`` is deterministic (the same on every replay) and unguessable (an
    HMAC under the callback key); ``deadline`` is when the callback times out
    (None: never). Valid only during the turn that made it, like ``ctx``.
    """

    name: str
    seq: int
    token: str
    url: str
    deadline: datetime | None
    _ops: ExternalOps

    def wait(self) -> Any:
        """The payload of ``durable.complete_callback(token, payload)`` (or the body POSTed to ``url``).

        A completion that arrived before this call is returned at once; else
        the run suspends until one arrives. Raises :class:`~durable.CallbackFailed`
        after ``durable.fail_callback`` and :class:`~durable.CallbackTimeout`
        once ``deadline`` has passed. Takes a position of its own; its result
        is recorded, so replays give the same answer.
        """
        return self._ops._wait_callback(self)


class ExternalOps(WaitOps):
    def wait_for_callback(self, name: str | None = None, timeout: Duration | None = None) -> Callback:
        """A callback handle (``token``, ``url``) a third party completes; ``handle.wait()`` returns its payload.

        With ``timeout`` (a duration from now), ``wait()`` raises
        :class:`~durable.CallbackTimeout` once it passes, and a completion
        arriving after it is refused as late. The handle is committed before
        this returns, so a completion can never arrive before it exists.
        """
        name = "callback" if name is None else name
        if not isinstance(name, str) or not name:
            raise InvalidInput("wait_for_callback needs a non-empty name (or None)")
        seq, cp = self._next(name, CALLBACK)
        token = callbacks.make_token(self._engine.settings.callback_secret, self.run_id, seq)
        url = self._engine.settings.callback_url.format(token=token)
        if cp is not None:
            return Callback(name, seq, token, url, cp.wake_at, self)
        now = self._clock.now()
        deadline = now + parse_duration(timeout) if timeout is not None else None
        self._port.defer(self._history.pending(seq, name, CALLBACK, wake_at=deadline, started_at=now))
        self._port.flush()
        return Callback(name, seq, token, url, deadline, self)

    def _wait_callback(self, handle: Callback) -> Any:
        envelope = self._wait_buffered(
            CALLBACK_TOKEN + handle.token,
            handle.name,
            CheckpointKind.CALLBACK_WAIT,
            None,
            deadline=handle.deadline,
            timeout_code="callback_timeout",
            # Both errors name the callback by its handle's position, the one its token carries.
            timeout_error=lambda name, _seq: CallbackTimeout(name, handle.seq),
        )
        if isinstance(envelope, dict) and "error" in envelope:
            raise CallbackFailed(handle.name, handle.seq, envelope["error"])
        return envelope.get("payload") if isinstance(envelope, dict) else envelope

    def breakpoint(self, label: str | None = None) -> None:
        """Pause the run here until ``durable.resume_breakpoint(run_id)`` (or the admin's "continue").

        The run is ``suspended`` with a pending ``breakpoint`` checkpoint named
        ``label``, which the admin and the API show; once resumed, replay goes
        past it without pausing again.
        """
        label = "breakpoint" if label is None else label
        if not isinstance(label, str) or not label:
            raise InvalidInput("breakpoint needs a non-empty label (or None)")
        seq, cp = self._next(label, CheckpointKind.BREAKPOINT)
        if cp is not None and cp.status == COMPLETED:
            return
        if cp is None:
            self._port.defer(self._history.pending(seq, label, CheckpointKind.BREAKPOINT))
        raise self._suspend(event=True)
