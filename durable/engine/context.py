"""``ctx``: the durable operations a workflow function calls.

Every operation takes the next position (``seq``) of the run's history. On
replay, a position that already holds a settled checkpoint returns its recorded
value without doing anything; a position that holds a *different* operation
raises :class:`~durable.NonDeterminismError`. An operation that cannot finish
now (a step in flight, a timer not yet due, a signal not yet sent) raises the
internal ``Suspend``, which ends the turn; the run resumes by replaying from
the top.

Rules for workflow code, which follow from replay: do all I/O in steps; read
time, randomness and ids through ``ctx.now()``, ``ctx.uuid()`` and
``ctx.side_effect()``; never catch ``BaseException`` around ``ctx`` calls.

The operations live in :mod:`durable.engine.ops` by family; this class only
composes them and adds what a workflow may read about its own run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durable.engine.ops.children import Call, ChildCall, ChildOps, call, child_call
from durable.engine.ops.entities import EntityOps
from durable.engine.ops.external import Callback, ExternalOps
from durable.engine.ops.sagas import SagaOps
from durable.engine.ops.values import ValueOps

__all__ = ["Call", "Callback", "ChildCall", "WorkflowContext", "call", "child_call"]


class WorkflowContext(ChildOps, ExternalOps, SagaOps, ValueOps, EntityOps):
    """Passed as the first argument of every workflow function.

    Not thread-safe and only valid during the turn that created it.
    """

    @property
    def workflow(self) -> str:
        return self._port.run.workflow

    @property
    def version(self) -> int:
        return self._port.run.version

    @property
    def input(self) -> Any:
        return self._port.run.input

    @property
    def schedule_key(self) -> str | None:
        """The key of the schedule that started this run (None: not started by a schedule)."""
        value = self._port.run.search_attributes.get("schedule_key")
        return value if isinstance(value, str) else None

    @property
    def schedule_window(self) -> datetime | None:
        """The window (an aware UTC datetime) this scheduled run starts for; a trigger's own instant."""
        value = self._port.run.search_attributes.get("schedule_window")
        return datetime.fromisoformat(value) if isinstance(value, str) else None

    @property
    def is_replaying(self) -> bool:
        """True while the next position was already recorded by an earlier turn."""
        return self._history.is_replaying()
