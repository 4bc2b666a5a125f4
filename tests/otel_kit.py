"""The OpenTelemetry SDK with in-memory exporters, installed once per process (the SDK allows one provider).

Shared by the tests and the Celery worker subprocesses of the trace test
(``DURABLE_IT_SPANS``: a file the worker appends its finished spans to, one
JSON line each, for the test process to read).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPANS_ENV = "DURABLE_IT_SPANS"

_lock = threading.Lock()
_installed: tuple[InMemorySpanExporter, InMemoryMetricReader] | None = None


class FileExporter(SpanExporter):
    """Appends each finished span to a file as a JSON line (what the test reads from a worker)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Any) -> SpanExportResult:
        with _lock, open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx, parent = span.get_span_context(), span.parent
    return {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "pid": os.getpid(),
        "start": span.start_time,
    }


def install() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """The process's exporter and metric reader (set as the global providers on first call)."""
    global _installed
    with _lock:
        if _installed is None:
            exporter = InMemorySpanExporter()
            tracer = TracerProvider()
            tracer.add_span_processor(SimpleSpanProcessor(exporter))
            if os.environ.get(SPANS_ENV):
                tracer.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ[SPANS_ENV])))
            trace.set_tracer_provider(tracer)
            reader = InMemoryMetricReader()
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            _installed = (exporter, reader)
    return _installed


def points(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
    """The data points of instrument ``name``: {sorted labels: value (sum, or histogram count)}."""
    found: dict[tuple[tuple[str, Any], ...], Any] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    key = tuple(sorted((point.attributes or {}).items()))
                    found[key] = getattr(point, "value", None) if hasattr(point, "value") else point.count
    return found
