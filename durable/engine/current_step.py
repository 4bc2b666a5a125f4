"""What a running step knows about itself: its identity, and its heartbeat.

The current step is a context variable, set while a step function runs (on a
worker, or eagerly inside a turn), so :func:`durable.current_step` and
:func:`durable.heartbeat` work from any code the step calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durable.engine import logs
from durable.engine.serialization import to_json

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
        logger.warning(
            "heartbeat for %s:%s not recorded",
            info.run_id,
            info.seq,
            exc_info=True,
            extra=logs.fields(info.run_id, seq=info.seq, step=info.name),
        )
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
