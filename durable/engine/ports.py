"""What the engine needs from the outside world: a store and a transport.

The engine (replay, context, step execution) talks only to these interfaces.
:mod:`durable.store` implements :class:`Store` on Django models (a portable
store, and a PostgreSQL one that runs the same write plans of
:mod:`durable.engine.plan` as single statements), :mod:`durable.store.memory` in memory;
:mod:`durable.transports` implements :class:`Transport` in-process and on Celery.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from durable.engine.plan_entities import EntityApplied, EntityCall, EntityOpRecord, EntityRecord
    from durable.engine.plan_external import BreakpointPlan, CallbackPlan
    from durable.engine.plan_fork import ForkPlan
    from durable.engine.plan_queues import AdmissionRead, QueueAdmissionPlan, QueueAdmitted, QueueSeen
    from durable.engine.retention import Evicted, ExpiredRun, ExpiryRule
    from durable.schedules.plan import ScheduleApplied, SchedulePlan, ScheduleRecord

from durable.engine.records import (
    REFUSED,
    Admitted,
    CancelResult,
    CheckpointRecord,
    CheckpointWrite,
    ClaimCheck,
    CommitResult,
    HistoryDelta,
    LeasesExpired,
    Outcome,
    QueueRecord,
    QueueStats,
    RunRecord,
    StepClaim,
    TurnWrites,
    Waiter,
)

# The protocols, and the records they exchange (defined in durable.engine.records).
__all__ = [
    "REFUSED",
    "Admitted",
    "CancelResult",
    "CheckpointRecord",
    "CheckpointWrite",
    "ClaimCheck",
    "CommitResult",
    "HistoryDelta",
    "LeasesExpired",
    "Outcome",
    "QueueRecord",
    "QueueStats",
    "RunRecord",
    "StepClaim",
    "Store",
    "Transport",
    "TurnWrites",
    "Waiter",
]


class Store(Protocol):
    """Durable state. Every status write is compare-and-set; see :mod:`durable.store`."""

    def create_run(self, fields: dict[str, Any]) -> bool: ...
    def create_leased_run(
        self, fields: dict[str, Any], owner: str, now: datetime, lease_until: datetime
    ) -> RunRecord | None: ...
    def get_run(self, run_id: str) -> RunRecord | None: ...
    def signal(self, run_id: str, name: str, payload: Any, now: datetime) -> bool: ...
    def cancel(self, run_id: str, now: datetime, compensate: bool = False) -> CancelResult: ...
    def requeue(self, run_id: str, now: datetime, deadline_at: datetime | None) -> list[str]: ...
    def fork_run(self, plan: ForkPlan) -> bool: ...
    def complete_callback(self, plan: CallbackPlan) -> bool: ...
    def resume_breakpoint(self, plan: BreakpointPlan) -> str: ...
    def pending_steps(self, run_id: str, now: datetime, new_wake: datetime) -> list[tuple[int, str | None]]: ...
    def acquire(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None: ...
    def load_checkpoints(self, run_id: str) -> dict[int, CheckpointRecord]: ...
    def load_histories(self, run_ids: list[str]) -> dict[str, dict[int, CheckpointRecord]]: ...
    # The checkpoints at ``seqs`` or past position ``after``, and the run's count of checkpoints.
    def load_delta(self, run_id: str, seqs: list[int], after: int) -> HistoryDelta: ...
    def commit(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        writes: TurnWrites,
        outcome: Outcome | None = None,
    ) -> CommitResult: ...
    def commit_many(
        self, commits: list[tuple[str, str, datetime, datetime, TurnWrites, Outcome]]
    ) -> list[CommitResult | Exception]: ...
    def renew_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> bool: ...
    def lease_held(self, run_id: str, owner: str) -> bool: ...
    # How many transaction blocks this thread's connection is inside (0: none; a resident workflow
    # never parks inside one it opened itself: durable.engine.resident).
    def transaction_depth(self) -> int: ...
    def release(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        wake_at: datetime,
        count_recovery: bool,
        max_attempts: int | None = None,
    ) -> str | None: ...
    def block(self, run_id: str, owner: str, now: datetime, reason: dict[str, Any]) -> bool: ...
    def next_signal(self, run_id: str, name: str, skip: list[int]) -> tuple[int, Any] | None: ...
    def claim_step(
        self,
        run_id: str,
        seq: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
        timeout_of: Callable[[str], float | None] = ...,
    ) -> StepClaim | None: ...
    def finish_step(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
        retry_at: datetime | None = None,
        claim: ClaimCheck | None = None,
        admission: AdmissionRead | None = None,
    ) -> bool: ...
    def finish_step_and_acquire(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        owner: str,
        lease_until: datetime,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
        claim: ClaimCheck | None = None,
        admission: AdmissionRead | None = None,
    ) -> RunRecord | None: ...
    def renew_step(self, run_id: str, seq: int, owner: str, lease_until: datetime) -> bool: ...
    def heartbeat_step(self, run_id: str, seq: int, now: datetime, progress: Any, lease_until: datetime) -> None: ...
    def poke(self, run_id: str, now: datetime) -> bool: ...
    def poke_if_settled(self, run_id: str, seq: int, now: datetime) -> bool: ...
    def unblock(self, run_ids: Iterable[str], now: datetime) -> int: ...
    # sweeps
    # ``namespaces``: only runs of those (a scoped worker's, durable.engine.namespaces); None: every run.
    def due_runs(self, now: datetime, limit: int, *, namespaces: Collection[str] | None = None) -> list[str]: ...
    def claim_due_runs(
        self, owner: str, now: datetime, lease_until: datetime, limit: int, *, namespaces: Collection[str] | None = None
    ) -> list[RunRecord]: ...
    def next_wake(self) -> datetime | None: ...
    def due_steps(
        self, now: datetime, limit: int, *, namespaces: Collection[str] | None = None
    ) -> list[tuple[str, int, str | None]]: ...
    def orphans(self, now: datetime, limit: int, *, namespaces: Collection[str] | None = None) -> list[str]: ...
    def recover_orphan(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        dead_lifecycle: Callable[[str], dict[str, Any] | None] = ...,
    ) -> RunRecord | str | None: ...
    def lease_holders(self, prefix: str, limit: int) -> list[str]: ...
    def expire_leases(self, owner: str, now: datetime) -> LeasesExpired: ...
    def overdue_runs(self, now: datetime, limit: int) -> list[str]: ...
    def request_timeout(self, run_id: str, now: datetime, error: dict[str, Any]) -> bool: ...
    def fail_overdue(
        self, run_id: str, now: datetime, error: dict[str, Any], lifecycle: dict[str, Any] | None = None
    ) -> bool: ...
    # lifecycle events
    def take_lifecycle_lease(
        self, run_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> RunRecord | None: ...
    def release_lifecycle_lease(self, run_id: str, owner: str) -> None: ...
    def finish_lifecycle(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        record: dict[str, Any],
        new_runs: list[dict[str, Any]],
        batched: list[tuple[str, Any, str, dict[str, Any]]],
        make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None],
    ) -> list[str]: ...
    def accumulate(
        self,
        batched: list[tuple[str, Any, str, dict[str, Any]]],
        now: datetime,
        make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None],
    ) -> list[str]: ...
    def fire_due_batches(
        self, now: datetime, limit: int, make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None]
    ) -> list[str]: ...
    def owed_runs(self, before: datetime, limit: int) -> list[str]: ...
    def settled_since(self, workflows: list[str], since: datetime, limit: int) -> list[RunRecord]: ...
    def mark_owed(self, run_id: str, subscribers: list[str]) -> bool: ...
    def expired_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]: ...
    def lapse_step(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        claim: ClaimCheck,
        error: dict[str, Any],
        retry_at: datetime | None = None,
    ) -> bool: ...
    def lost_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]: ...
    def redispatch_step(self, run_id: str, seq: int, expected_wake: datetime | None, new_wake: datetime) -> bool: ...
    def blocked_runs(self, limit: int) -> list[dict[str, Any]]: ...
    def next_due(self) -> datetime | None: ...
    def notify_settled(self, run_id: str, now: datetime) -> list[str]: ...
    def resolve_run(self, run_id: str) -> RunRecord | None: ...
    def take_event(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        seq: int,
        name: str,
        match: dict[str, Any] | None,
        create: bool,
    ) -> tuple[Any] | None: ...
    def publish_event(self, name: str, payload: Any, event_id: str, now: datetime) -> dict[str, Any]: ...
    def republish_targets(
        self,
        *,
        run_id: str | None,
        workflow: str | None,
        statuses: list[str],
        since: datetime | None,
        until: datetime | None,
        limit: int,
    ) -> list[str]: ...
    def wake(self, run_ids: list[str], now: datetime) -> None: ...
    def list_runs(
        self,
        *,
        statuses: list[str],
        workflow: str | None,
        namespace: str | None,
        tag: str | None,
        attributes: list[tuple[str, str, Any]],
        created_after: datetime | None,
        created_before: datetime | None,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[RunRecord]: ...
    # the worker fleet's descriptors
    def advertise(self, descriptor: dict[str, Any], now: datetime, expires_at: datetime) -> None: ...
    def refresh_worker(self, worker_id: str, now: datetime, expires_at: datetime) -> bool: ...
    def retire_worker(self, worker_id: str) -> None: ...
    def live_workers(self, now: datetime) -> list[dict[str, Any]]: ...
    def prune_workers(self, now: datetime) -> int: ...
    # schedules (durable.schedules): rows written only by executing a SchedulePlan
    def create_schedule(self, fields: dict[str, Any]) -> bool: ...
    def get_schedule(self, key: str) -> ScheduleRecord | None: ...
    def list_schedules(self) -> list[ScheduleRecord]: ...
    def delete_schedule(self, key: str) -> bool: ...
    def apply_schedule(self, plan: SchedulePlan, now: datetime) -> ScheduleApplied: ...
    def fire_schedules(
        self, now: datetime, limit: int, decide: Callable[[ScheduleRecord, str | None], SchedulePlan | None]
    ) -> list[ScheduleApplied]: ...
    # retention (durable.worker.retention): finished runs past their age, deleted in claimed batches
    def expired_runs(
        self, rule: ExpiryRule, now: datetime, after: tuple[datetime, str] | None, limit: int
    ) -> list[ExpiredRun]: ...
    def needed_runs(self, runs: list[ExpiredRun]) -> set[str]: ...
    def claim_expired(self, ids: list[str], owner: str, now: datetime, lease_until: datetime) -> list[str]: ...
    def export_runs(self, ids: list[str]) -> list[dict[str, Any]]: ...
    def evict_runs(self, ids: list[str], owner: str) -> Evicted: ...
    def release_expired(self, ids: list[str], owner: str) -> None: ...
    # singleton workflows (durable.engine.plan_singletons): admission under the key's slot lock
    def admit_run(self, fields: dict[str, Any], max_queue_depth: int | None, now: datetime) -> Admitted: ...
    def hand_over(self, workflow: str, key: str, now: datetime) -> list[str]: ...
    def waiting_keys(self, limit: int) -> list[tuple[str, str]]: ...
    # limited step queues (DURABLE["QUEUES"]; durable.engine.plan_queues): admission under the queue row's lock
    def admit_steps(self, plan: QueueAdmissionPlan, seen: QueueSeen | None = None) -> QueueAdmitted: ...
    def queue_rows(self) -> dict[str, QueueRecord]: ...
    def configure_queue(
        self, name: str, now: datetime, *, overrides: dict[str, Any] | None = None, paused: bool | None = None
    ) -> QueueRecord: ...
    def queue_stats(self, name: str, now: datetime, key: str | None = None) -> QueueStats: ...
    # entities (durable.engine.plan_entities): one op of a key at a time, its state and log row together
    def apply_entity_op(self, call: EntityCall, now: datetime) -> EntityApplied: ...
    def get_entity(self, name: str, key: str) -> EntityRecord | None: ...
    def entity_ops(self, name: str, key: str, limit: int) -> list[EntityOpRecord]: ...
    def atomic(self) -> Any: ...
    # Can turns of different runs write at the same time? (False: one writer at a time,
    # so running a page's turns on several threads would only queue them on one lock.)
    def parallel_writes(self) -> bool: ...


class Transport(Protocol):
    """Pushes work to whoever executes it. Called after the writes it announces commit.

    A transport may lose messages: the sweeps find the work again in the database.
    ``dispatch_turn`` and ``dispatch_step`` are required; the other methods are
    optional capabilities with safe defaults, which a transport that subclasses
    this protocol inherits (callers never probe for them). ``namespace`` is the
    run's namespace when the caller knows it (None: the transport reads it if
    it needs it; a run's namespace never changes).
    """

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None: ...

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> bool | None:
        """Send step ``seq`` of ``run_id`` to whoever runs ``queue``'s steps.

        True only when the step was queued on this process's own threads to
        begin without a delay (admission then knows a result of this process
        follows it: :mod:`durable.engine.grants_here`); anything else says nothing.
        """
        ...

    def takes_leased_runs(self) -> bool:
        """True when :meth:`run_leased` runs a turn in this process at once.

        ``durable.start`` then inserts a new run already leased to this process
        and hands it over, saving the separate acquire of its first turn.
        """
        return False

    def run_leased(self, run: RunRecord) -> None:
        """Run the first turn of ``run``, inserted leased to this process (only if :meth:`takes_leased_runs`)."""
        name = type(self).__name__
        raise NotImplementedError(f"{name} does not take leased runs")

    def attach_loop(self, nudge: Callable[[float], None] | None) -> None:
        """A worker loop runs in this process: ``nudge(delay)`` wakes it by a delayed turn's due time.

        A transport may then leave delayed turns to the loop's sweep; ``None``
        detaches the loop. The default ignores it.
        """
        return None

    def shutdown(self, wait: bool = False) -> None:
        """Stop this transport's threads (``wait``: let work in progress finish). Default: nothing to stop."""
        return None
