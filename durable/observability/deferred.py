"""Metric measurements taken on the engine's threads, recorded into the OpenTelemetry SDK off them.

Recording one measurement in the SDK costs tens of microseconds (its
attributes are validated and hashed on every call); a workflow of three
local steps takes nine. The engine's threads therefore only append
``(instrument, value, labels)`` to a queue, and the measurements reach the
SDK from a background thread every :data:`INTERVAL` seconds, and at every
collection: an observable instrument's callback drains the queue first, and
the SDK runs callbacks before it aggregates, so a reader (a periodic
exporter, Prometheus, a test's in-memory reader) never sees fewer
measurements than were taken before it asked. Counts queued with
:meth:`DeferredRecorder.count` are summed per counter and label set within a
drain and recorded as one addition. The same queue carries the spans of
in-process steps (:mod:`durable.observability.late_spans`).

Guarantees: each measurement is recorded exactly once, in the process that
took it (``collections.deque`` appends and pops are atomic, so no lock is
held on the hot path and none is lost between a drain and an append); a
forked child starts with an empty queue and its own thread, on first use
(the parent records what it took itself). Measurements taken in the last
interval before a process exits without a final collection are recorded
by an exit hook, unless the process ends without running them (``os._exit``,
a kill), as the SDK's own processors would lose theirs.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

INTERVAL = 1.0

# ``(job, a, b)``, run as ``job(a, b)``: an instrument's record/add method with a value and
# its labels, a late span's build (:mod:`durable.observability.late_spans`), or a count
# (:meth:`DeferredRecorder.count`: ``_count_job`` with the counter's add and labels, and n).
Job = tuple[Callable[[Any, Any], None], Any, Any]


def _count_job(counted: tuple[Callable[..., None], Mapping[str, str]], n: float) -> None:
    """A count that was not summed with others (drained one by one): add it as it is."""
    add, labels = counted
    add(n, labels)


class DeferredRecorder:
    """A queue of measurements and the thread that records them (see the module docstring)."""

    def __init__(self, meter: metrics.Meter, interval: float = INTERVAL) -> None:
        self._queue: deque[Job] = deque()
        self._interval = interval
        self._owner: int | None = None
        self._start_lock = threading.Lock()
        # Its callback drains the queue at every collection; it reports no value of its own.
        meter.create_observable_gauge(
            "durable.observer.pending", callbacks=[self._on_collect], description="Measurements not yet recorded"
        )

    def add(self, job: Callable[[Any, Any], None], a: Any, b: Any) -> None:
        """Queue ``job(a, b)``: e.g. ``(histogram.record, value, labels)`` (the hot path: an append, a pid check)."""
        if self._owner != os.getpid():
            self._start()
        self._queue.append((job, a, b))

    def count(self, add: Callable[..., None], n: float, labels: Mapping[str, str]) -> None:
        """Queue ``add(n, labels)`` for a counter; a drain adds the counts of equal labels as one sum."""
        self.add(_count_job, (add, labels), n)

    def drain(self) -> int:
        """Record every queued measurement now; returns how many."""
        queue, done = self._queue, 0
        sums: dict[tuple[Callable[..., None], frozenset[tuple[str, str]]], tuple[Mapping[str, str], float]] = {}
        while True:
            try:
                job, a, b = queue.popleft()
            except IndexError:
                break
            done += 1
            if job is _count_job:
                # One SDK call per counter and label set instead of one per count.
                key = (a[0], frozenset(a[1].items()))
                labels, total = sums.get(key, (a[1], 0))
                sums[key] = (labels, total + b)
                continue
            _call(job, a, b)
        for (add, _), (labels, total) in sums.items():
            _call(add, total, labels)
        return done

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
            if self._owner is None:
                # Before the SDK's own exit hook (registered earlier, so run later) shuts its processors.
                atexit.register(self.drain)
            self._owner = pid
            threading.Thread(target=self._loop, name="durable-metrics", daemon=True).start()

    def _loop(self) -> None:
        pid = os.getpid()
        while self._owner == pid:
            time.sleep(self._interval)
            self.drain()


def _call(job: Callable[[Any, Any], None], a: Any, b: Any) -> None:
    try:
        job(a, b)
    except Exception:  # noqa: BLE001 - an observer must never raise; the SDK logs its own errors
        pass
