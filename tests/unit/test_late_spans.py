"""Spans of in-process steps: recorded on the engine's thread, built in the SDK by the recorder, exactly once."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durable.engine import observe
from durable.observability.deferred import DeferredRecorder
from durable.observability.late_spans import LateSpan
from durable.observability.otel import OtelObserver


@pytest.fixture
def kit() -> tuple[OtelObserver, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OtelObserver()
    observer.tracer = provider.get_tracer("test")
    observer.deferred = DeferredRecorder(observer_meter(), interval=3600)  # the test drains
    return observer, exporter


def observer_meter() -> Any:
    from opentelemetry.sdk.metrics import MeterProvider

    return MeterProvider().get_meter("test")


def _names(exporter: InMemorySpanExporter) -> list[str]:
    return [s.name for s in exporter.get_finished_spans()]


def test_a_local_step_span_is_built_at_the_flush_with_its_recorded_times_parent_and_outcome(kit):
    observer, exporter = kit
    turn = observer.begin(observe.TURN, {"run_id": "r", "workflow": "w"})
    step = observer.begin(observe.STEP, {"run_id": "r", "seq": 1, "step": "s", "mode": "local"}, parent=turn)
    assert isinstance(step, LateSpan)
    step.end("completed")
    turn.end("completed")
    assert _names(exporter) == ["durable.turn"]  # nothing built on the engine's thread
    assert observer.flush() >= 1
    built = {s.name: s for s in exporter.get_finished_spans()}
    span, parent = built["durable.step"], built["durable.turn"]
    assert span.parent.span_id == parent.context.span_id and span.context.trace_id == parent.context.trace_id
    assert span.start_time >= parent.start_time and span.end_time <= parent.end_time  # the recorded times
    assert span.attributes["durable.outcome"] == "completed" and span.attributes["durable.seq"] == 1
    assert observer.flush() == 0 and _names(exporter).count("durable.step") == 1


def test_a_failed_step_keeps_its_exception_event_and_error_status(kit):
    observer, exporter = kit
    turn = observer.begin(observe.TURN, {"run_id": "r"})
    step = observer.begin(observe.STEP, {"run_id": "r", "step": "s"}, parent=turn)
    step.fail(ValueError("boom"))
    step.end("failed")
    observer.flush()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "durable.step"]
    assert span.status.status_code.name == "ERROR" and "ValueError: boom" in (span.status.description or "")
    assert [e.name for e in span.events] == ["exception"]
    assert span.events[0].timestamp <= span.end_time


def test_asking_for_the_context_builds_the_span_there_and_only_once(kit):
    observer, exporter = kit
    turn = observer.begin(observe.TURN, {"run_id": "r"})
    step = observer.begin(observe.STEP, {"run_id": "r", "step": "s"}, parent=turn)
    carrier = step.context()
    assert carrier and carrier["traceparent"].split("-")[1] == f"{turn._span.get_span_context().trace_id:032x}"
    step.set("attempt", 2)
    step.end("completed")
    observer.flush()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "durable.step"]
    assert carrier["traceparent"].split("-")[2] == f"{span.context.span_id:016x}"
    assert span.attributes["durable.attempt"] == 2 and span.attributes["durable.outcome"] == "completed"


def test_a_dispatched_step_span_is_built_at_once(kit):
    observer, exporter = kit
    step = observer.begin(observe.STEP, {"run_id": "r", "step": "s", "mode": "dispatched"})
    assert not isinstance(step, LateSpan)
    step.end("completed")
    assert _names(exporter) == ["durable.step"]
