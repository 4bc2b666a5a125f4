"""The records the engine and its store exchange: runs, checkpoints, writes and write results.

Plain dataclasses, no behaviour beyond small predicates; :mod:`durable.engine.ports`
re-exports them beside the :class:`~durable.engine.ports.Store` protocol that uses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from durable.engine.vocab import CheckpointStatus


@dataclass
class RunRecord:
    id: str
    workflow: str
    version: int
    status: str
    namespace: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    wake_at: datetime | None
    locked_by: str | None
    locked_until: datetime | None
    recovery_attempts: int
    turns: int
    tags: list[str]
    search_attributes: dict[str, Any]
    priority: int
    parent_id: str | None
    retry_of: str | None
    continued_to: str | None
    query_values: dict[str, Any]
    patches: list[str]
    cancel_requested: bool
    lifecycle: dict[str, Any]
    lifecycle_owed: bool
    deadline_at: datetime | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # The W3C trace context of the caller of start() (observability; None when not traced).
    trace_context: dict[str, str] | None = None
    # durable.fork: the run whose history before position ``forked_at_seq`` this one kept.
    forked_from: str | None = None
    forked_at_seq: int | None = None
    # A singleton workflow's run: its key, the key's limit, its place in the key's queue.
    singleton_key: str | None = None
    singleton_limit: int | None = None
    singleton_seq: int | None = None


@dataclass
class CheckpointRecord:
    seq: int
    name: str
    kind: str
    status: str
    input: Any = None
    output: Any = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    wake_at: datetime | None = None
    retry_at: datetime | None = None
    timeout_at: datetime | None = None
    queue: str | None = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # The worker executing a dispatched step (set when it is claimed).
    locked_by: str | None = None
    # A step of a limited queue: its key, and where it stands with the queue (vocab.Admission).
    queue_key: str | None = None
    admission: str | None = None
    # A limited queue's step: its run's priority, by which the queue admits it (0 elsewhere).
    priority: int = 0


@dataclass(frozen=True)
class HistoryDelta:
    """What :meth:`Store.load_delta` read: the checkpoints asked for, and how many the run has in all.

    ``records``: the run's checkpoints at the positions asked for or past the
    position given, by position; ``total``: the number of checkpoints the run
    has (those read and all the others), so a reader can tell that a
    checkpoint it did not ask for was deleted or added.
    """

    records: dict[int, CheckpointRecord]
    total: int


@dataclass
class CheckpointWrite:
    """Insert a checkpoint (``create``) or update one whose status is in ``expect``.

    ``claimed_by``: the update settles a step this process claimed; it must
    still be claimed by that owner, else the whole commit is refused (as for a
    lost lease), since the turn went on with a result the history would not hold.
    """

    record: CheckpointRecord
    create: bool
    expect: tuple[str, ...] = ()
    claimed_by: str | None = None


@dataclass
class Waiter:
    """The run waits on ``token`` at position ``seq`` (see SignalWaiter)."""

    token: str
    seq: int
    match: dict[str, Any] | None = None


@dataclass
class Outcome:
    """How a turn ends: suspended, blocked, completed, failed or cancelled.

    ``next_run`` (continue-as-new) is inserted in the same transaction, before
    this run completes.
    """

    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    wake_at: datetime | None = None
    waiters: list[Waiter] = field(default_factory=list)
    next_run: dict[str, Any] | None = None
    # Waiter tokens to wake once a terminal outcome commits (this run, the run it retries).
    notify: list[str] = field(default_factory=list)
    # The run had a pending wait when the turn began (so waiter rows may exist).
    had_waiters: bool = True
    # The turn already ran in cancel-with-undo mode (no need to wake it again at once).
    cancel_seen: bool = False
    # Positions of dispatched steps (already in flight) the run is suspended on.
    step_seqs: list[int] = field(default_factory=list)
    # Terminal outcomes: the subscribers the lifecycle event is owed to ({"owed": [...]}).
    lifecycle: dict[str, Any] | None = None
    # Terminal outcomes of a singleton run: (workflow, key) whose slot the commit hands over.
    slot: tuple[str, str] | None = None


@dataclass(frozen=True)
class CommitResult:
    """What a turn's commit did, as the store reports it (the engine's inputs stay untouched).

    ``written``: the lease compare-and-set matched and everything was written
    (False: nothing was). ``woken``: runs the commit woke (waiters on this run,
    cancelled children's parents), to dispatch after commit. ``wake_at``: a
    suspended run's wake as written, which may be sooner than the one the
    turn asked for (a cancel-with-undo, or a step result, arrived meanwhile).
    ``cancelled``: runs the commit moved to ``cancelled`` (fail-fast siblings
    and their descendants), to announce after commit.
    """

    written: bool
    woken: tuple[str, ...] = ()
    wake_at: datetime | None = None
    cancelled: tuple[str, ...] = ()


REFUSED = CommitResult(written=False)


@dataclass(frozen=True)
class CancelResult:
    """What :meth:`Store.cancel` did.

    ``done``: the run was active and this call cancelled it (or, with undo,
    asked it to stop). ``woken``: runs to dispatch a turn for after commit.
    ``cancelled``: the runs this call moved to ``cancelled`` itself (the run
    and its active descendants; with undo only the blocked ones, the others
    end ``cancelled`` in their own next turn).
    """

    done: bool
    woken: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()


@dataclass(frozen=True)
class Admitted:
    """What :meth:`Store.admit_run` did with a new run of a singleton workflow.

    ``created``: the run was inserted (False: a run with its id exists and
    nothing was written); ``status``: the status it was inserted with
    (``pending``, or ``queued`` behind the key's other runs); ``admitted``:
    waiting runs of the key the same write admitted, to dispatch after commit.
    """

    created: bool
    status: str | None = None
    admitted: tuple[str, ...] = ()


@dataclass
class TurnWrites:
    """Everything a turn wants to commit in one transaction.

    ``run_fields`` are columns of the run itself (search attributes, query
    values, patches), written by the lease holder only.
    """

    checkpoints: list[CheckpointWrite] = field(default_factory=list)
    consumed_signals: list[int] = field(default_factory=list)
    new_runs: list[dict[str, Any]] = field(default_factory=list)
    run_fields: dict[str, Any] = field(default_factory=dict)
    cancel_runs: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.checkpoints or self.consumed_signals or self.new_runs or self.run_fields or self.cancel_runs)


@dataclass
class StepClaim:
    """A dispatched step claimed for execution by one worker."""

    run_id: str
    seq: int
    name: str
    input: Any
    attempt: int
    namespace: str
    # What observability reports (queue wait, the run's workflow); not used to run the step.
    queue: str | None = None
    ready_at: datetime | None = None  # since when it waited: its retry's due time, else its dispatch
    workflow: str | None = None
    trace_context: dict[str, str] | None = None


@dataclass(frozen=True)
class QueueRecord:
    """A limited queue's stored row: limit overrides (a None value turns that limit off), paused."""

    name: str
    overrides: dict[str, Any]
    paused: bool
    updated_at: datetime | None = None


@dataclass(frozen=True)
class QueueStats:
    """A limited queue now: slots held, steps waiting, the oldest waiting arrival, admissions in the last minute."""

    running: int
    waiting: int
    oldest_waiting: datetime | None
    admitted_last_minute: int
    # Slots held by steps of the key asked about (queue_stats(..., key)); 0 when none was.
    key_running: int = 0


@dataclass(frozen=True)
class LeasesExpired:
    """What :meth:`Store.expire_leases` ended: run (turn) leases and step execution leases."""

    runs: int
    steps: int


@dataclass(frozen=True)
class ClaimCheck:
    """The attempt a step write belongs to: checkpoint ``running``, ``locked_by`` ``owner``, ``attempts`` ``attempt``.

    Every claim counts an attempt, so (owner, attempt) names one claim even
    when one process claims the same step twice. With ``lapsed_at`` the
    attempt must also have run out by then: its execution lease
    (``wake_at``) or its timeout (``timeout_at``) earlier than ``lapsed_at``,
    so a lease its worker renewed meanwhile is not taken away.
    """

    owner: str | None
    attempt: int
    lapsed_at: datetime | None = None

    def holds(self, cp: Mapping[str, Any]) -> bool:
        """Does checkpoint row ``cp`` still belong to this claim (as the stores' conditions say)?"""
        if (cp["status"], cp["locked_by"], cp["attempts"]) != (CheckpointStatus.RUNNING, self.owner, self.attempt):
            return False
        if self.lapsed_at is None:
            return True
        return any(cp[name] is not None and cp[name] < self.lapsed_at for name in ("wake_at", "timeout_at"))
