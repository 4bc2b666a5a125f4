"""Metric measurements taken on the engine's threads, recorded into the OpenTelemetry SDK off them.

Recording one measurement in the SDK costs tens of microseconds (its
attributes are validated and hashed on every call); a workflow of three
local steps takes nine. The engine's threads therefore only append
``(instrument, value, labels)`` to a queue, and the measurements reach the
SDK from a background thread every :data:`INTERVAL` seconds, and at every
collection: an observable instrument's callback drains the queue first, and
the SDK runs callbacks before it aggregates, so a reader (a periodic
exporter, Prometheus, a test's in-memory reader) never sees fewer
measurements than were taken before it asked.

Guarantees: each measurement is recorded exactly once, in the process that
took it (``collections.deque`` appends and pops are atomic, so no lock is
held on the hot path and none is lost between a drain and an append); a
forked child starts with an empty queue and its own thread, on first use
(the parent records what it took itself). Measurements taken in the last
interval before a process exits without a final collection are lost, as
the SDK's own periodic reader would lose them.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

INTERVAL = 1.0

# An instrument's record/add method, a value, the labels.
Measurement = tuple[Callable[..., None], float, Mapping[str, str]]


class DeferredRecorder:
    """A queue of measurements and the thread that records them (see the module docstring)."""

    def __init__(self, meter: metrics.Meter, interval: float = INTERVAL) -> None:
        self._queue: deque[Measurement] = deque()
        self._interval = interval
        self._owner: int | None = None
        self._start_lock = threading.Lock()
        # Its callback drains the queue at every collection; it reports no value of its own.
        meter.create_observable_gauge(
            "durable.observer.pending", callbacks=[self._on_collect], description="Measurements not yet recorded"
        )

    def add(self, record: Callable[..., None], value: float, labels: Mapping[str, str]) -> None:
        """Queue one measurement (the hot path: an append, and a pid check)."""
        if self._owner != os.getpid():
            self._start()
        self._queue.append((record, value, labels))

    def drain(self) -> int:
        """Record every queued measurement now; returns how many."""
        queue, done = self._queue, 0
        while True:
            try:
                record, value, labels = queue.popleft()
            except IndexError:
                return done
            try:
                record(value, labels)
            except Exception:  # noqa: BLE001 - an observer must never raise; the SDK logs its own errors
                pass
            done += 1

    def _on_collect(self, options: CallbackOptions) -> Iterable[Observation]:
        self.drain()
        return ()

    def _start(self) -> None:
        with self._start_lock:
            pid = os.getpid()
            if self._owner == pid:
                return
            if self._owner is not None:
                self._queue.clear()  # a forked child: what is queued is the parent's to record
            self._owner = pid
            threading.Thread(target=self._loop, name="durable-metrics", daemon=True).start()

    def _loop(self) -> None:
        pid = os.getpid()
        while self._owner == pid:
            time.sleep(self._interval)
            self.drain()
