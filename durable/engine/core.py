"""The engine object: the wiring of store, transport, settings and this process's identity.

An :class:`Engine` is immutable after construction: everything it depends on
(store, transport, settings, registry, clock, fleet, lease keeper, owner id,
eager routes, listeners) is passed in, and nothing rebinds an attribute later.
What it measures while it runs lives in its :class:`EngineStats`; which
queues it is admitting, in its :class:`~durable.engine.admission.Admitters`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol

from durable.engine import admission, execution, logs, resident, turn
from durable.engine.clock import Clock
from durable.engine.faults import NO_FAULTS, StepFaults
from durable.engine.grants_here import GrantsHere
from durable.engine.history_cache import HistoryCache
from durable.engine.leases import LeaseKeeper
from durable.engine.listeners import Listeners
from durable.engine.observe import Observer
from durable.engine.owners import make_owner_id as make_owner_id
from durable.engine.ports import CheckpointRecord, RunRecord, Store, Transport
from durable.engine.registry import Registry
from durable.engine.vocab import StepResult, TurnResult

logger = logging.getLogger("durable")


class Fleet(Protocol):
    """What the engine asks about the live workers (see :mod:`durable.fleet`)."""

    def can_serve(self, step: str, queue: str | None) -> bool: ...
    def subscribers(self, event: str) -> list[str]: ...


class AnyFleet:
    """A fleet that can run every step and advertises no lifecycle subscription."""

    def can_serve(self, step: str, queue: str | None) -> bool:
        return True

    def subscribers(self, event: str) -> list[str]:
        return []


class EngineStats:
    """Figures the engine measures as it runs (read by the sweeps to choose how to run a page).

    ``turn_seconds``: mean seconds a recent turn of ``run_turns`` took before its
    final commit, smoothed per batch. Updated without a lock: a lost update
    between two threads only delays the smoothing by one batch.
    ``schedules_synced``: the registry's code-schedule revision this engine
    last wrote to the store (-1: none yet); a race only syncs twice, which is
    harmless (the sync is idempotent).
    ``retention_due``: when this engine's next retention pass is due (None: at
    the next tick); racing threads at worst run one extra pass, which is safe.
    ``retention_cursors``: where each retention rule's walk stopped (so a pass
    goes on past runs it kept); a lost update only re-reads a page.
    """

    def __init__(self) -> None:
        self.turn_seconds = 0.0
        self.schedules_synced = -1
        self.retention_due: datetime | None = None
        self.retention_cursors: dict[tuple[Any, ...], tuple[datetime, str]] = {}

    def record_turns(self, per_turn: float) -> None:
        previous = self.turn_seconds
        self.turn_seconds = per_turn if not previous else (previous + per_turn) / 2


class Engine:
    """Runs turns and steps against a store, announcing work through a transport.

    ``settings`` is any object with the attributes of
    :class:`durable.conf.DurableSettings`; ``registry`` holds the workflow and
    step definitions; ``clock`` gives every timestamp the engine writes;
    ``fleet`` answers "can any live worker run this step?"; ``eager_routes``
    are the step routes this process consumes (None: the default queue): a
    turn run here claims one dispatched step on these routes in its own commit
    and runs it at once (``EAGER_STEPS``); ``listeners`` are told about
    committed turns and lifecycle deliveries; ``histories`` keeps the histories
    of runs this engine's turns suspended, so their next turn here reads only
    what changed (:mod:`durable.engine.history_cache`; default: off).
    """

    def __init__(
        self,
        store: Store,
        transport: Transport,
        settings: Any,
        *,
        registry: Registry,
        clock: Clock,
        owner: str | None = None,
        keeper: LeaseKeeper | None = None,
        fleet: Fleet | None = None,
        eager_routes: frozenset[str | None] = frozenset(),
        listeners: Listeners | None = None,
        observer: Observer | None = None,
        faults: StepFaults | None = None,
        capabilities: frozenset[str] = frozenset(),
        namespaces: frozenset[str] | None = None,
        histories: HistoryCache | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.settings = settings
        self.registry = registry
        self.clock = clock
        self.owner = owner or make_owner_id()
        self.keeper = keeper or LeaseKeeper()
        self.fleet: Fleet = fleet if fleet is not None else AnyFleet()
        self.eager_routes = eager_routes
        self.listeners = listeners if listeners is not None else Listeners()
        self.observer = observer if observer is not None else Observer()
        self.faults = faults if faults is not None else NO_FAULTS
        # What this process's workers have (durable_worker --capability; a Celery worker's queues).
        self.capabilities = capabilities
        # The namespaces whose runs this process's worker takes (durable_worker --namespace); None: all.
        self.namespaces = namespaces
        self.histories = histories if histories is not None else HistoryCache()
        # Workflows may park between turns (durable.engine.resident): it needs the history cache.
        self.resident = (
            bool(getattr(settings, "resident_workflows", False)) and resident.available() and self.histories.size > 0
        )
        self.stats = EngineStats()
        # Write-triggered admission passes of limited queues, one per queue at a time here.
        self.admitters = admission.Admitters()
        # Granted steps queued on this process's threads, not begun (durable.engine.grants_here).
        self.grants_here = GrantsHere()

    def run_turn(
        self,
        run_id: str,
        *,
        acquired: RunRecord | None = None,
        fresh: bool = False,
        history: dict[int, CheckpointRecord] | None = None,
    ) -> TurnResult | None:
        return turn.run_turn(self, run_id, acquired=acquired, fresh=fresh, history=history)

    def run_turns(
        self,
        claimed: list[tuple[RunRecord, dict[int, CheckpointRecord] | None]],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> list[TurnResult | None]:
        return turn.run_turns(self, claimed, should_stop)

    def execute_step(
        self, run_id: str, seq: int, *, continue_turn: bool = True, trace: dict[str, str] | None = None
    ) -> StepResult:
        return execution.execute_step(self, run_id, seq, continue_turn=continue_turn, trace=trace)

    def emit(self, status: str, run: RunRecord) -> None:
        self.observer.status(status, run.workflow)
        self.listeners.emit(status, run)

    def emit_settled(self, status: str, run_ids: Iterable[str]) -> None:
        """Tell the listeners about runs a write outside a turn moved to ``status`` (a cancel, a sweep).

        Call it once per write, after that write committed: each run is read
        back (its committed row) and announced once. A run that cannot be read
        is logged and skipped; this never raises.
        """
        for run_id in run_ids:
            try:
                run = self.store.get_run(run_id)
            except Exception:
                logger.warning(
                    "could not read %s to announce it %s", run_id, status, exc_info=True, extra=logs.fields(run_id)
                )
                continue
            if run is not None:
                self.emit(status, run)

    def emit_lifecycle(self, run: RunRecord, subscriber: str, outcome: str) -> None:
        self.listeners.emit_lifecycle(run, subscriber, outcome)
