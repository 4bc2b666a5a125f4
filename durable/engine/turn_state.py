"""The state of one turn: its lease, its history and the writes it has not committed yet.

A :class:`Turn` is what the ``ctx`` operations see through
:class:`~durable.engine.ops.port.TurnPort`. Guarantees:

* Every write is conditional on the turn's lease (``status = 'running' AND
  locked_by = <us>``), and renews it in the same statement: a turn that lost
  its lease writes nothing, and every later operation raises ``LeaseLost``.
* Work announced after a commit (dispatches) runs only once that commit is
  written; a failed dispatch is logged, never raised (the sweeps re-drive it).
* A store error inside the turn becomes ``EngineFault``, which abandons the
  turn (the run is given back), never a user-visible exception.

Not thread-safe, except :meth:`mark_lost`, which the lease keeper's thread calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durable.engine import logs
from durable.engine.history import History
from durable.engine.observe import NOOP_SPAN, Span
from durable.engine.ports import CheckpointWrite, CommitResult, RunRecord, TurnWrites, Waiter
from durable.engine.serialization import decoded
from durable.exceptions import EngineFault, LeaseLost

if TYPE_CHECKING:
    from durable.engine.core import Engine
    from durable.engine.resident import Parked

logger = logging.getLogger("durable.turn")


class Turn:
    """One turn of ``run`` by ``engine``: implements the ``TurnPort`` its operations use."""

    def __init__(self, engine: Engine, run: RunRecord, history: History) -> None:
        self.engine = engine
        self.run = run
        self.history = history
        self.writes = TurnWrites()
        self.span: Span = NOOP_SPAN
        self.waiters: list[Waiter] = []
        self.suspended = False
        # Dispatched steps already in flight that this turn waits on.
        self.step_seqs: list[int] = []
        self._wakes: list[datetime] = []
        self._event_wait = False
        self._after_commit: list[Callable[[], object]] = []
        # Set once by the lease keeper's thread and only read here: a plain flag is enough (an
        # attribute store is atomic), and a turn is built for every run woken.
        self._lost = False
        self._taken_signals: list[int] = []
        # The lease was confirmed by the write that took it and only workflow code ran since.
        self._lease_fresh = False
        # The workflow runs in a greenlet of its own and may park (durable.engine.resident);
        # ``parked``: where it did, once it has, until the final commit keeps it or it ends.
        self.parks = False
        self._depth = 0
        self.parked: Parked | None = None

    # -- lease -------------------------------------------------------------
    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.engine.settings.lease)

    def mark_lost(self) -> None:
        self._lost = True

    def lease_taken(self) -> None:
        """The lease was just taken by a write (the leased insert, the acquire, the page claim), with no history.

        The first :meth:`confirm_lease` then needs no read: that write confirmed
        the lease, and only the workflow's own code (no store call) ran since.
        """
        self._lease_fresh = True

    def check_lease(self) -> None:
        if self._lost:
            raise LeaseLost()

    def confirm_lease(self) -> None:
        """Check (and renew) the lease before a side effect when there is nothing to flush.

        A cancel that landed since the turn began then stops the turn before the
        side effect, instead of after it.
        """
        fresh, self._lease_fresh = self._lease_fresh, False
        if self.writes:
            self.flush()
            return
        self.check_lease()
        if fresh:
            # Folded into the write that took the lease: a cancel since then (within the workflow's
            # own code before its first side effect) is seen at the next commit, as during a step.
            return
        # A read: the keeper renews the lease; this only asks whether a cancel took it.
        if not self._guard(lambda: self.engine.store.lease_held(self.run.id, self.engine.owner)):
            self.mark_lost()
            raise LeaseLost()

    # -- writes ------------------------------------------------------------
    def defer(self, write: CheckpointWrite) -> None:
        self.writes.checkpoints.append(write)
        self.history.remember(write.record)

    def discard(self, seq: int) -> None:
        self.writes.checkpoints = [w for w in self.writes.checkpoints if w.record.seq != seq]

    def after_commit(self, fn: Callable[[], object]) -> None:
        self._after_commit.append(fn)

    def create_run(self, fields: dict[str, Any]) -> None:
        self.writes.new_runs.append(fields)

    def creating(self, run_id: str) -> bool:
        return any(fields["id"] == run_id for fields in self.writes.new_runs)

    def cancel_run(self, run_id: str) -> None:
        self.writes.cancel_runs.append(run_id)

    def set_run_field(self, name: str, value: Any) -> None:
        self.writes.run_fields[name] = value

    def consume_signal(self, signal_id: int) -> None:
        self.writes.consumed_signals.append(signal_id)

    def flush(self) -> None:
        """Commit deferred writes now (renewing the lease in the same statement)."""
        if not self.writes:
            return
        self.check_lease()
        now = self.engine.clock.now()
        done: CommitResult = self._guard(
            lambda: self.engine.store.commit(self.run.id, self.engine.owner, now, self.lease_until(now), self.writes)
        )
        if not done.written:
            self.mark_lost()
            raise LeaseLost()
        self.writes = TurnWrites()
        self.run_after_commit()

    def run_after_commit(self) -> None:
        callbacks, self._after_commit = self._after_commit, []
        if not callbacks:
            return
        # Dispatches carry the turn's trace context (a step continues the trace on its worker).
        with self.engine.observer.activate(self.span):
            self._run_callbacks(callbacks)

    def _run_callbacks(self, callbacks: list[Callable[[], object]]) -> None:
        for fn in callbacks:
            try:
                fn()
            except Exception:
                # A lost dispatch is re-driven by the sweeps; it must not fail the turn.
                logger.warning(
                    "dispatch after commit failed for run %s", self.run.id, exc_info=True, extra=logs.of_run(self.run)
                )

    # -- reads -------------------------------------------------------------
    def can_serve(self, step: str, queue: str | None) -> bool:
        fleet = self.engine.fleet
        served: bool = self._guard(lambda: fleet.can_serve(step, queue))
        return served

    def take_signal(self, token: str) -> tuple[int, Any] | None:
        got: tuple[int, Any] | None = self._guard(
            lambda: self.engine.store.next_signal(self.run.id, token, self._taken_signals)
        )
        if got is not None:
            self._taken_signals.append(got[0])
            decoded(got[1], f"the payload of signal {token!r}")
        return got

    def take_event(
        self, seq: int, name: str, match: dict[str, Any] | None, deadline: datetime | None, *, create: bool
    ) -> tuple[Any] | None:
        """Take the oldest buffered event matching ``match`` and record it at ``seq``, in one commit."""
        self.flush()
        engine = self.engine
        now = engine.clock.now()
        got: tuple[Any] | None = self._guard(
            lambda: engine.store.take_event(
                self.run.id, engine.owner, now, self.lease_until(now), seq, name, match, create
            )
        )
        if got is not None:
            decoded(got[0], f"the payload of event {name!r}")
        return got

    def resolve_run(self, run_id: str) -> RunRecord | None:
        found: RunRecord | None = self._guard(lambda: self.engine.store.resolve_run(run_id))
        if found is not None:
            decoded(found.output, f"the output of run {run_id!r}")
            decoded(found.error, f"the error of run {run_id!r}")
        return found

    def _guard(self, fn: Callable[[], Any]) -> Any:
        """Call the store; its errors become ``EngineFault``. After a store call the lease is no longer fresh."""
        self._lease_fresh = False
        try:
            return fn()
        except (LeaseLost, EngineFault):
            raise
        except Exception as exc:
            raise EngineFault(exc) from exc

    # -- suspension --------------------------------------------------------
    def suspend(self, wake_at: datetime | None, *, event: bool) -> None:
        self.suspended = True
        if wake_at is not None:
            self._wakes.append(wake_at)
        if event:
            self._event_wait = True

    def allow_parking(self) -> None:
        """Let the workflow park (:mod:`durable.engine.resident`): from now on, outside any
        transaction block it opens itself (parked in one, the turn's commit would sit inside it)."""
        self.parks = True
        self._depth = self.engine.store.transaction_depth()

    def may_park(self) -> bool:
        """Parking allowed, no wait registered yet this turn, and no transaction block of the workflow's open."""
        waits = self.suspended or self.step_seqs or self.waiters or self._wakes or self._event_wait
        return self.parks and not waits and self.engine.store.transaction_depth() == self._depth

    def end_parked(self) -> None:
        """The parked workflow is not kept (the commit was refused or failed): end it."""
        parked, self.parked = self.parked, None
        if parked is not None:
            parked.end()

    def await_step(self, seq: int) -> None:
        self.step_seqs.append(seq)

    def wait_on(self, token: str, seq: int, match: dict[str, Any] | None = None) -> None:
        self.waiters.append(Waiter(token, seq, match))

    def clear_waiters(self) -> None:
        self.waiters.clear()

    def next_wake(self, now: datetime) -> datetime:
        wakes = list(self._wakes)
        if self._event_wait or not wakes:
            # Reconcile fallback: a run waiting on an event is looked at again even if its wake is lost.
            wakes.append(now + timedelta(seconds=self.engine.settings.reconcile_after))
        return min(wakes)
