"""The Prometheus exposition of ``GET /api/durable/metrics``: what the database says, at scrape time.

Every series is read from the database when scraped (one
:func:`durable.observability.snapshot.take`), so any web process answers for
the whole system, whichever workers ran the work, with exact values and no
collector, no shared memory between processes and no state to lose on a
restart. (Per-process timings, such as turn and step durations, are
OpenTelemetry instruments: see :mod:`durable.observability.otel`.)

Written with ``prometheus-client`` (extra ``prometheus``), imported only here.

==================================================== =====================================
``durable_runs{workflow,status}``                    runs now in each status, per workflow
``durable_runs_started_total{workflow}``             runs ever started (rows), per workflow
``durable_steps_pending{queue}``                     ready pending steps
``durable_steps_oldest_pending_age_seconds{queue}``  how long the oldest one has waited
``durable_workers_live{queue}``                      live workers consuming the queue (Celery)
``durable_runs_stale{kind}``                         stale runs, per kind (see the health check)
``durable_timer_most_overdue_seconds``               lateness of the most overdue wake
==================================================== =====================================

Labels are workflow names, statuses, queue names and stale kinds: bounded by
the code, never by the data (no run ids).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from durable.observability import snapshot
from durable.observability.snapshot import Snapshot

CONTENT_TYPE = CONTENT_TYPE_LATEST


class DurableCollector:
    """A prometheus-client collector reading one snapshot per scrape."""

    def __init__(self, snap: Snapshot | None = None) -> None:
        self._snap = snap

    def collect(self) -> Iterator[Any]:
        snap = self._snap or snapshot.take()
        runs = GaugeMetricFamily("durable_runs", "Runs now in each status", labels=["workflow", "status"])
        started: dict[str, int] = {}
        for (workflow, status), count in sorted(snap.runs.items()):
            runs.add_metric([workflow, status], count)
            started[workflow] = started.get(workflow, 0) + count
        yield runs
        total = CounterMetricFamily(
            "durable_runs_started", "Runs started (rows of the runs table)", labels=["workflow"]
        )
        for workflow, count in sorted(started.items()):
            total.add_metric([workflow], count)
        yield total
        yield from _queues(snap)
        stale = GaugeMetricFamily("durable_runs_stale", "Stale runs (see the health check)", labels=["kind"])
        for kind in snapshot.STALE_KINDS:
            stale.add_metric([kind], snap.stale.get(kind, 0))
        yield stale
        overdue = GaugeMetricFamily("durable_timer_most_overdue_seconds", "Lateness of the most overdue wake")
        overdue.add_metric([], snap.most_overdue_timer_seconds or 0.0)
        yield overdue


def _queues(snap: Snapshot) -> Iterator[Any]:
    pending = GaugeMetricFamily("durable_steps_pending", "Ready pending steps", labels=["queue"])
    oldest = GaugeMetricFamily(
        "durable_steps_oldest_pending_age_seconds", "Wait of the oldest ready pending step", labels=["queue"]
    )
    workers = GaugeMetricFamily("durable_workers_live", "Live workers consuming the queue", labels=["queue"])
    for name, queue in snap.queues.items():
        pending.add_metric([name], queue.pending_steps)
        oldest.add_metric([name], queue.oldest_pending_seconds or 0.0)
        if queue.live_workers is not None:
            workers.add_metric([name], queue.live_workers)
    yield from (pending, oldest, workers)


def exposition(snap: Snapshot | None = None) -> bytes:
    """The text exposition of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DurableCollector(snap))
    return generate_latest(registry)
