"""What the engine tells an observer while it works: spans of starts, turns and steps, and sweeps.

The engine calls an :class:`Observer`; the default one does nothing and costs
a method call. :mod:`durable.observability.otel` implements it on the
OpenTelemetry API (traces and metrics) when ``DURABLE["OPENTELEMETRY"]`` is
on. Nothing here imports OpenTelemetry, Django or Celery.

A span is opened with :meth:`Observer.begin` and closed with
:meth:`Span.end`, once, by whoever finishes the work (a turn's span is opened
when the turn takes its run and closed after its final commit, which may be
batched with other runs' commits). ``trace`` is the trace context a run
carries (:attr:`~durable.engine.ports.RunRecord.trace_context`, stored from
the caller of ``start()``): later spans of the run continue that trace.
``parent`` is a span of this process (an in-process step's turn): passing it
spares the observer a round trip through a serialized carrier. An observer
must never raise into the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

# Span names.
START = "durable.start"
TURN = "durable.turn"
STEP = "durable.step"
# How a step ran: in the workflow's turn (local), in a worker's turn (eager), or dispatched.
LOCAL, EAGER, DISPATCHED = "local", "eager", "dispatched"


class Span:
    """A unit of work being observed: attributes, an outcome, an error, an end."""

    def set(self, key: str, value: Any) -> None:
        """Set attribute ``key`` (``outcome``, ``attempt``...)."""

    def fail(self, exc: BaseException) -> None:
        """Record ``exc`` on the span and mark it failed."""

    def end(self, outcome: str | None = None) -> None:
        """Close the span (with its outcome); later calls do nothing."""

    def context(self) -> dict[str, str] | None:
        """This span's trace context as a carrier (to store on a run, or send with a message)."""
        return None


NOOP_SPAN = Span()


class Observer:
    """The engine's observer; this base does nothing (see the module docstring)."""

    enabled = False

    def begin(
        self,
        name: str,
        attributes: Mapping[str, Any],
        *,
        trace: Mapping[str, str] | None = None,
        parent: Span | None = None,
    ) -> Span:
        """Open a span named ``name`` with ``attributes``: a child of ``parent`` (a span of this
        process, e.g. the turn of an in-process step), else continuing ``trace`` if given."""
        return NOOP_SPAN

    def activate(self, span: Span) -> AbstractContextManager[None]:
        """Make ``span`` the current span within the block (what a dispatch propagates)."""
        return nullcontext()

    def current(self) -> dict[str, str] | None:
        """The caller's current trace context as a carrier (None: none, or not observed)."""
        return None

    def flush(self) -> int:
        """Hand whatever the observer queued (measurements, spans) to its backend now; how many."""
        return 0

    def sweep(self, kind: str, seconds: float, items: int) -> None:
        """One sweep of ``kind`` ran for ``seconds`` and handled ``items`` rows."""

    def status(self, status: str, workflow: str) -> None:
        """A run of ``workflow`` reached ``status``, after the write committed (as the signals are sent)."""
