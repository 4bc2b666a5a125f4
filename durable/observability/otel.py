"""The engine's observer on the OpenTelemetry API: spans, and the metrics measured from them.

Used when ``DURABLE["OPENTELEMETRY"]`` is on (install the ``otel`` extra:
``opentelemetry-api``). Only the API is imported: spans and measurements go to
whatever SDK the project configured (a ``TracerProvider`` and a
``MeterProvider``), and to nothing when it configured none.

Spans: ``durable.start`` (a child of the caller's current span; its context
is stored on the run), ``durable.turn`` (a child of the run's stored context,
so every turn of a run, on any machine and day, is in the trace of its start),
``durable.step`` (a child of the turn that ran it, or for a dispatched step,
of the turn that dispatched it, through the Celery message headers). A child
run's context is its parent's turn, so a child's trace is its parent's.
Attributes: ``durable.run_id``, ``durable.workflow``, ``durable.version``,
``durable.seq``, ``durable.step``, ``durable.attempt``, ``durable.queue``,
``durable.mode``, ``durable.outcome``; errors are recorded as exceptions on
the span, with an error status.

Metrics (instrument names; labels in braces, all of bounded cardinality: no run ids):

========================== ========= ===================================
``durable.runs.started``   counter   {workflow}
``durable.runs.finished``  counter   {workflow, status}: completed, failed, cancelled, dead
``durable.turn.duration``  histogram seconds {workflow, outcome}
``durable.step.duration``  histogram seconds {step, mode, outcome}
``durable.step.attempts``  counter   {step, mode, outcome}: one per execution
``durable.step.queue_wait`` histogram seconds {queue}: due (dispatch or retry) to claim
``durable.timer.lateness`` histogram seconds {workflow}: wake due to turn start
``durable.sweep.duration`` histogram seconds {sweep}
``durable.sweep.items``    counter   {sweep}: rows each sweep handled
========================== ========= ===================================
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Status, StatusCode

from durable import _version
from durable.engine import observe
from durable.engine.observe import Observer, Span
from durable.engine.vocab import TERMINAL
from durable.observability.deferred import DeferredRecorder
from durable.observability.late_spans import LateSpan

PREFIX = "durable."
FINISHED = frozenset(str(status) for status in TERMINAL)


def sdk_attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attributes: prefixed, without None values (which it refuses)."""
    return {PREFIX + key: value for key, value in values.items() if value is not None}


class OtelSpan(Span):
    """One OpenTelemetry span, and the measurements taken when it ends."""

    def __init__(self, observer: OtelObserver, name: str, span: Any, values: dict[str, Any]) -> None:
        self._observer, self._name, self._span, self._values = observer, name, span, values
        self._started = time.perf_counter()
        self._ended = False

    def set(self, key: str, value: Any) -> None:
        self._values[key] = value
        if value is not None:
            self._span.set_attribute(PREFIX + key, value)

    def fail(self, exc: BaseException) -> None:
        self._span.record_exception(exc)
        self._span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))

    def end(self, outcome: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if outcome is not None:
            self.set("outcome", str(outcome))
        self._span.end()
        self._observer.measure(self._name, time.perf_counter() - self._started, self._values)

    def context(self) -> dict[str, str] | None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=self.otel_context())
        return carrier or None

    def otel_context(self) -> otel_context.Context:
        """An OpenTelemetry context whose current span is this one (no carrier round trip)."""
        return trace.set_span_in_context(self._span)


class OtelObserver(Observer):
    """Spans through the global ``TracerProvider``, measurements through the global ``MeterProvider``."""

    enabled = True

    def __init__(self) -> None:
        self.tracer = trace.get_tracer("durable", _version.__version__)
        meter = metrics.get_meter("durable", _version.__version__)
        self.started = meter.create_counter("durable.runs.started", unit="{run}", description="Runs started")
        self.finished = meter.create_counter("durable.runs.finished", unit="{run}", description="Runs that ended")
        self.turn_duration = meter.create_histogram("durable.turn.duration", unit="s", description="Turn duration")
        self.step_duration = meter.create_histogram("durable.step.duration", unit="s", description="Step duration")
        self.step_attempts = meter.create_counter(
            "durable.step.attempts", unit="{attempt}", description="Step executions"
        )
        self.queue_wait = meter.create_histogram("durable.step.queue_wait", unit="s", description="Due to claimed")
        self.lateness = meter.create_histogram("durable.timer.lateness", unit="s", description="Wake due to turn")
        self.sweep_duration = meter.create_histogram("durable.sweep.duration", unit="s", description="Sweep duration")
        self.sweep_items = meter.create_counter("durable.sweep.items", unit="{row}", description="Rows swept")
        self.deferred = DeferredRecorder(meter)

    def begin(
        self,
        name: str,
        attributes: Mapping[str, Any],
        *,
        trace: Mapping[str, str] | None = None,
        parent: Span | None = None,
    ) -> Span:
        context: otel_context.Context | None = None
        if name == observe.STEP and isinstance(parent, OtelSpan):
            # A step run inside its turn: a leaf, built off this thread (late_spans).
            return LateSpan(self, name, parent, dict(attributes))
        if isinstance(parent, OtelSpan):
            context = parent.otel_context()
        elif trace:
            context = propagate.extract(dict(trace))
        span = self.tracer.start_span(name, context=context, attributes=sdk_attributes(attributes))
        return OtelSpan(self, name, span, dict(attributes))

    def flush(self) -> int:
        """Hand every queued measurement and in-process step span to the SDK now; how many.

        They reach it from a background thread within a second anyway, and at
        every metric collection; call this before reading an in-memory span
        exporter in a test, or before a process exits without collecting.
        """
        return self.deferred.drain()

    def activate(self, span: Span) -> AbstractContextManager[None]:
        return _activated(span)

    def current(self) -> dict[str, str] | None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier or None

    def sweep(self, kind: str, seconds: float, items: int) -> None:
        add = self.deferred.add
        add(self.sweep_duration.record, seconds, {"sweep": kind})
        if items:
            self.deferred.count(self.sweep_items.add, items, {"sweep": kind})

    def status(self, status: str, workflow: str) -> None:
        if status in FINISHED:
            self.deferred.count(self.finished.add, 1, {"workflow": workflow, "status": status})

    def measure(self, name: str, seconds: float, values: Mapping[str, Any]) -> None:
        """What the end of a span measures (see the module docstring); recorded off the engine's thread."""
        add, outcome = self.deferred.add, str(values.get("outcome"))
        if name == observe.TURN:
            add(self.turn_duration.record, seconds, {"workflow": str(values.get("workflow")), "outcome": outcome})
            if values.get("lateness") is not None:
                add(self.lateness.record, float(values["lateness"]), {"workflow": str(values.get("workflow"))})
        elif name == observe.STEP:
            labels = {"step": str(values.get("step")), "mode": str(values.get("mode")), "outcome": outcome}
            add(self.step_duration.record, seconds, labels)
            self.deferred.count(self.step_attempts.add, 1, labels)
            if values.get("queue_wait") is not None:
                queue = {"queue": str(values.get("queue") or "durable")}
                add(self.queue_wait.record, float(values["queue_wait"]), queue)
        elif name == observe.START and outcome == "started":
            self.deferred.count(self.started.add, 1, {"workflow": str(values.get("workflow"))})


@contextmanager
def _activated(span: Span) -> Iterator[None]:
    if not isinstance(span, OtelSpan):
        yield
        return
    token = otel_context.attach(span.otel_context())
    try:
        yield
    finally:
        otel_context.detach(token)
