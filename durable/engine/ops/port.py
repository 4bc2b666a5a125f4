"""What a ``ctx`` operation may ask of the turn it runs in.

The turn (:class:`durable.engine.turn_state.Turn`) implements this protocol;
operations see nothing else of it. Every store read goes through the port, so
an infrastructure error becomes an ``EngineFault`` (the turn is abandoned and
retried) and never a user-visible exception.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from durable.engine.observe import Span
from durable.engine.ports import CheckpointWrite, RunRecord

if TYPE_CHECKING:
    from durable.engine.core import Engine


class TurnPort(Protocol):
    @property
    def engine(self) -> Engine:
        """Configuration the operations read (settings, registry, clock, transport, keeper)."""
        ...

    @property
    def run(self) -> RunRecord: ...

    @property
    def span(self) -> Span:
        """The turn's span (observability): the parent of the spans of its steps."""
        ...

    @property
    def suspended(self) -> bool:
        """The turn already decided to suspend (user code swallowed a Suspend)."""
        ...

    # -- the lease -----------------------------------------------------------
    def check_lease(self) -> None:
        """Raise LeaseLost if the lease keeper reported the lease gone."""

    def confirm_lease(self) -> None:
        """Make what was recorded durable (or check the lease) before a side effect."""

    # -- writes --------------------------------------------------------------
    def defer(self, write: CheckpointWrite) -> None:
        """Write ``write`` with the turn's next commit (replay sees it at once)."""

    def discard(self, seq: int) -> None:
        """Forget a deferred checkpoint write at ``seq`` (its transaction rolled back)."""

    def flush(self) -> None:
        """Commit the deferred writes now (renewing the lease in the same statement)."""

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` once the writes deferred so far committed (a dispatch)."""

    def create_run(self, fields: dict[str, Any]) -> None:
        """Insert a new run (a child) with the next commit."""

    def creating(self, run_id: str) -> bool:
        """``run_id`` is a run this turn creates and has not committed yet."""
        ...

    def cancel_run(self, run_id: str) -> None:
        """Cancel ``run_id`` (a child) with the next commit."""

    def set_run_field(self, name: str, value: Any) -> None:
        """Write a column of this run (patches, search attributes, query values) with the next commit."""

    # -- waiting -------------------------------------------------------------
    def suspend(self, wake_at: datetime | None, *, event: bool) -> None:
        """End the turn suspended; wake by ``wake_at``, or when an event (``event``) arrives."""

    def may_park(self) -> bool:
        """May the workflow park instead of unwinding (:mod:`durable.engine.resident`)? Only when
        the turn allows it, has registered no wait yet, and no transaction block of the workflow's is open."""
        ...

    def await_step(self, seq: int) -> None:
        """The run waits on the dispatched step at ``seq`` (already in flight)."""

    def wait_on(self, token: str, seq: int, match: dict[str, Any] | None = None) -> None:
        """Register a waiter on ``token`` for position ``seq`` with the final commit."""

    def clear_waiters(self) -> None: ...

    # -- reads ---------------------------------------------------------------
    def can_serve(self, step: str, queue: str | None) -> bool:
        """Can any live worker run ``step`` from ``queue``?"""
        ...

    def take_signal(self, token: str) -> tuple[int, Any] | None:
        """The oldest buffered signal on ``token`` not taken yet in this turn: (id, payload)."""
        ...

    def consume_signal(self, signal_id: int) -> None:
        """Delete the buffered signal ``signal_id`` with the next commit."""

    def take_event(
        self, seq: int, name: str, match: dict[str, Any] | None, deadline: datetime | None, *, create: bool
    ) -> tuple[Any] | None:
        """Take the oldest buffered event matching ``match`` and record it at ``seq``, in one commit."""
        ...

    def resolve_run(self, run_id: str) -> RunRecord | None:
        """The run that settles ``run_id`` (end of its continue-as-new chain, or a successful retry)."""
        ...
