"""The deferred metric recorder: off the caller's thread, yet complete at every collection, exactly once."""

from __future__ import annotations

import os
import threading
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from durable.observability.deferred import DeferredRecorder


def _kit() -> tuple[InMemoryMetricReader, Any, DeferredRecorder]:
    """A reader, a counter ``c`` and a recorder whose background thread never drains (the test does)."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    return reader, meter.create_counter("c"), DeferredRecorder(meter, interval=3600)


def _sums(reader: InMemoryMetricReader) -> dict[str, float]:
    data = reader.get_metrics_data()
    out: dict[str, float] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = sum(getattr(p, "value", getattr(p, "sum", 0)) for p in metric.data.data_points)
    return out


def test_measurements_wait_in_the_queue_until_a_collection_drains_them():
    reader, counter, recorder = _kit()
    for _ in range(5):
        recorder.add(counter.add, 1, {"k": "v"})
    assert len(recorder._queue) == 5  # nothing recorded on the caller's thread
    assert _sums(reader) == {"c": 5}  # the collection drained first
    assert len(recorder._queue) == 0
    # The hook reports no value of its own.
    assert "durable.observer.pending" not in _sums(reader)


def test_concurrent_producers_and_drains_record_each_measurement_exactly_once():
    reader, counter, recorder = _kit()
    stop = threading.Event()

    def produce() -> None:
        for _ in range(5000):
            recorder.add(counter.add, 1, {"k": "v"})

    def drain() -> None:
        while not stop.is_set():
            recorder.drain()

    drainer = threading.Thread(target=drain)
    drainer.start()
    producers = [threading.Thread(target=produce) for _ in range(4)]
    for t in producers:
        t.start()
    for t in producers:
        t.join()
    stop.set()
    drainer.join()
    assert _sums(reader) == {"c": 20000}


def test_a_forked_child_drops_the_parents_queue_and_starts_its_own_thread():
    reader, counter, recorder = _kit()
    recorder.add(counter.add, 1, {})
    recorder._owner = os.getpid() + 1  # as a child sees it after fork: the queue is its parent's
    recorder.add(counter.add, 10, {})
    assert recorder._owner == os.getpid()
    assert _sums(reader) == {"c": 10}


def test_a_failing_instrument_does_not_stop_the_drain():
    reader, counter, recorder = _kit()

    def broken(value: float, labels: object) -> None:
        raise RuntimeError("exporter bug")

    recorder.add(broken, 1, {})
    recorder.add(counter.add, 2, {})
    assert recorder.drain() == 2
    assert _sums(reader) == {"c": 2}


def test_counts_of_one_counter_and_label_set_are_added_to_the_sdk_as_one_sum():
    reader, counter, recorder = _kit()
    calls: list[tuple[float, dict[str, str]]] = []

    def add(n: float, labels: dict[str, str]) -> None:
        calls.append((n, labels))
        counter.add(n, labels)

    for _ in range(3):
        recorder.count(add, 1, {"k": "a"})
    recorder.count(add, 2, {"k": "b"})
    recorder.add(add, 5, {"k": "a"})  # a plain measurement is recorded as it came
    assert recorder.drain() == 5
    assert sorted(calls, key=lambda c: (c[1]["k"], c[0])) == [(3, {"k": "a"}), (5, {"k": "a"}), (2, {"k": "b"})]
    assert _sums(reader) == {"c": 10}
