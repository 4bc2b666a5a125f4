"""Plumbing shared by every ``ctx`` operation: the turn it belongs to, positions, suspension."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable.engine import resident
from durable.engine.history import History, copied
from durable.engine.ops.port import TurnPort
from durable.exceptions import Suspend

if TYPE_CHECKING:
    from datetime import datetime

    from durable.engine.core import Engine
    from durable.engine.ports import CheckpointRecord


@dataclass(frozen=True)
class Compensation:
    """How to undo the completed step at ``seq``: ``undo(input, output)``."""

    seq: int
    name: str
    undo: Any
    input: Any
    output: Any


class OpsBase:
    """State every operation family shares. Not thread-safe; valid only during its turn."""

    def __init__(self, history: History, port: TurnPort) -> None:
        self._history = history
        self._port = port
        self._engine: Engine = port.engine
        self._clock = self._engine.clock
        # Completed steps with an undo, in order (a saga); rebuilt the same way on replay.
        self._compensations: list[Compensation] = []
        # Limited queues this turn wrote waiting steps to: each is asked to admit once, after commit.
        self._to_admit: set[str] = set()

    @property
    def run_id(self) -> str:
        return self._port.run.id

    @property
    def namespace(self) -> str:
        return self._port.run.namespace

    def _next(self, name: str, kind: str) -> tuple[int, CheckpointRecord | None]:
        """Take the next position (see :meth:`History.take`), unless the turn is already over."""
        port = self._port
        if port.suspended:
            # User code caught Suspend with a bare except; do not let it go on.
            raise Suspend()
        port.check_lease()
        return self._history.take(name, kind)

    def _suspend(self, wake_at: datetime | None = None, *, event: bool = False) -> Suspend:
        self._port.suspend(wake_at, event=event)
        return Suspend()

    def _wait_for_step(self, seq: int, *, in_flight: bool) -> CheckpointRecord:
        """Wait for the dispatched step at ``seq`` (``in_flight``: written by an earlier turn).

        Parks the workflow or raises Suspend; see :meth:`_stay`.
        """
        may_park = self._may_park()
        if in_flight:
            self._port.await_step(seq)
        self._port.suspend(None, event=True)
        return self._stay(seq, may_park)

    def _may_park(self) -> bool:
        """May the operation about to wait park the workflow? Asked before it registers its wait.

        Only where a replay would stop at this operation and at nothing else:
        the turn waits on no other step, signal, timer or event yet, no
        transaction block the workflow opened is open, and it is not
        cancelling, compensating or carrying a non-determinism
        (:mod:`durable.engine.resident`).
        """
        port, history = self._port, self._history
        return (
            port.may_park()
            and not (history.cancelling or history.compensating or history.nondeterminism)
            and resident.parkable()
        )

    def _stay(self, seq: int, may_park: bool) -> CheckpointRecord:
        """End the turn at the operation of position ``seq``, its wait registered: park, else raise Suspend.

        Parked, this returns in a later turn, once the workflow is resumed
        (this ``ctx`` then bound to that turn), what the position holds now
        (:meth:`History.retake`): the operation goes on from it as its replay
        would have.
        """
        if not may_park:
            raise Suspend()
        resident.park()
        cp = self._history.retake(seq)
        if cp is None:  # pragma: no cover - a parked wait's checkpoint was committed before it parked
            raise Suspend()
        return cp

    def _rebind(self, history: History, port: TurnPort) -> None:
        """Serve the turn that resumed this parked workflow (its saga so far stays)."""
        self._history = history
        self._port = port
        self._to_admit = set()

    def _remember_undo(self, seq: int, name: str, undo: Any, call_input: Any, output: Any) -> None:
        """A completed step with an undo: register it for the saga (rebuilt the same way on replay).

        The input is copied: on replay it is the recorded one, which the history keeps unshared.
        """
        if undo is not None:
            self._compensations.append(Compensation(seq, name, undo, copied(call_input), output))
