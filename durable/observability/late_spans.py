"""Spans of in-process steps, built in the OpenTelemetry SDK off the engine's thread.

A span costs tens of microseconds in the SDK (sampling, ids, attribute
validation, the processors' ``on_start``/``on_end``), and a workflow of three
local steps opens three of them on the thread that runs the workflow. A step
run inside its turn (local or eager) is a leaf: nothing is started under it
and no code looks up its context (user code inside the step runs under the
turn's span, which is active). So its span is only *recorded* on the engine's
thread (a start time, attributes, an error, an end time, a few attribute
writes into a dict) and handed to the :class:`~durable.observability.deferred.DeferredRecorder`,
whose thread creates the SDK span with those explicit start and end times.

Guarantees: the SDK span has the times, attributes, status, exception event
and parent it would have had if built on the spot; it reaches the SDK's span
processors within the recorder's interval, or at the next metric collection
or :meth:`~durable.observability.otel.OtelObserver.flush`, exactly once. If
any code asks for the context of such a span, it is built in the SDK there
and then (:meth:`LateSpan.context`), and is not built again. Processors that
read the *current* context in ``on_start`` see the recorder's thread's
(empty) context, not the step's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Status, StatusCode

from durable.engine.observe import Span

if TYPE_CHECKING:
    from durable.observability.otel import OtelObserver, OtelSpan


class LateSpan(Span):
    """A step span recorded now and built in the SDK later (see the module docstring).

    Used by one thread at a time (the one running the step), like every span.
    """

    __slots__ = ("_built", "_ended", "_error", "_name", "_observer", "_parent", "_start_ns", "_started", "_values")

    def __init__(self, observer: OtelObserver, name: str, parent: OtelSpan, values: dict[str, Any]) -> None:
        self._observer, self._name, self._parent, self._values = observer, name, parent, values
        self._start_ns = time.time_ns()
        self._started = time.perf_counter()
        self._error: tuple[BaseException, int] | None = None
        self._ended = False
        self._built: Any = None

    def set(self, key: str, value: Any) -> None:
        self._values[key] = value
        if self._built is not None and value is not None:
            self._built.set_attribute("durable." + key, value)

    def fail(self, exc: BaseException) -> None:
        if self._built is not None:
            _record_failure(self._built, exc, time.time_ns())
        else:
            self._error = (exc, time.time_ns())

    def end(self, outcome: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if outcome is not None:
            self._values["outcome"] = str(outcome)
        end_ns, seconds = time.time_ns(), time.perf_counter() - self._started
        self._observer.deferred.add(self._finish, end_ns, seconds)

    def context(self) -> dict[str, str] | None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self._build()))
        return carrier or None

    def _build(self) -> Any:
        """The SDK span, created on first need (at the step's recorded start time)."""
        if self._built is None:
            from durable.observability.otel import sdk_attributes

            self._built = self._observer.tracer.start_span(
                self._name,
                context=self._parent.otel_context(),
                attributes=sdk_attributes(self._values),
                start_time=self._start_ns,
            )
            if self._error is not None:
                _record_failure(self._built, *self._error)
        return self._built

    def _finish(self, end_ns: int, seconds: float) -> None:
        """On the recorder's thread: build the span if nobody needed it earlier, end it, measure it."""
        built = self._built is not None
        span = self._build()
        if built and self._values.get("outcome") is not None:
            span.set_attribute("durable.outcome", self._values["outcome"])
        span.end(end_time=end_ns)
        self._observer.measure(self._name, seconds, self._values)


def _record_failure(span: Any, exc: BaseException, at_ns: int) -> None:
    span.record_exception(exc, timestamp=at_ns)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
