"""Observability hooks: callbacks told about committed turns and lifecycle deliveries.

A listener never affects the engine: it is called after the write it reports
committed, and an exception it raises is logged and swallowed. Adding or
removing a listener is safe while another thread emits (emit iterates over a
snapshot).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from durable.engine.ports import RunRecord

logger = logging.getLogger("durable")

StatusListener = Callable[[str, RunRecord], None]
LifecycleListener = Callable[[RunRecord, str, str], None]
T = TypeVar("T")


class Listeners:
    """Status callbacks ``(status, run)`` and lifecycle callbacks ``(run, subscriber, outcome)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status: tuple[StatusListener, ...] = ()
        self._lifecycle: tuple[LifecycleListener, ...] = ()

    def add(self, listener: StatusListener) -> None:
        """Call ``listener(status, run)`` after each committed turn."""
        with self._lock:
            self._status = (*self._status, listener)

    def remove(self, listener: StatusListener) -> None:
        """Forget ``listener`` (its first registration); a listener not added is ignored."""
        with self._lock:
            self._status = _without(self._status, listener)

    def add_lifecycle(self, listener: LifecycleListener) -> None:
        """Call ``listener(source_run, subscriber, outcome)`` after each lifecycle delivery."""
        with self._lock:
            self._lifecycle = (*self._lifecycle, listener)

    def remove_lifecycle(self, listener: LifecycleListener) -> None:
        with self._lock:
            self._lifecycle = _without(self._lifecycle, listener)

    def __contains__(self, listener: object) -> bool:
        return listener in self._status or listener in self._lifecycle

    def emit(self, status: str, run: RunRecord) -> None:
        for listener in self._status:
            try:
                listener(status, run)
            except Exception:
                logger.exception("listener failed")

    def emit_lifecycle(self, run: RunRecord, subscriber: str, outcome: str) -> None:
        for listener in self._lifecycle:
            try:
                listener(run, subscriber, outcome)
            except Exception:
                logger.exception("lifecycle listener failed")


def _without(listeners: tuple[T, ...], listener: T) -> tuple[T, ...]:
    if listener not in listeners:
        return listeners
    index = listeners.index(listener)
    return listeners[:index] + listeners[index + 1 :]
