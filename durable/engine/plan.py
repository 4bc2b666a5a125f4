"""What each write changes, decided once: pure functions from the engine's intent to row changes.

A turn's commit (and a flush, a step claim, a step result, a page of final
commits) is turned here into a frozen plan: the run's column changes with
the compare-and-set condition they are written under, the checkpoints to
insert and the conditional updates, the waiter rows, the buffered signals
consumed, the runs inserted or cancelled, the event names to lock, and the
work that follows the commit. A store executes a plan and decides nothing:
the portable store with the ORM, the PostgreSQL store as single statements
where the plan's :class:`Shape` allows it. No Django here, no database.

Guarantees a plan carries, whoever executes it:

* Everything a commit writes is conditional on the run's lease
  (``status = running AND locked_by = owner``, :class:`LeaseCheck`) and on
  every step claim it settles still being held (:attr:`CheckpointChange.claimed_by`);
  when any of those fails nothing at all is written.
* A checkpoint update applies only while the checkpoint's status is one of
  ``expect`` (a settled checkpoint always wins).
* A suspension's wake is ``now`` when a cancel-with-undo arrived during the
  turn (:class:`CancelWake`, decided on the locked row), and the run is woken
  at once when something it waits on settled meanwhile (``recheck``).
* Timestamps are the engine's ``now``, never the database's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from durable.engine.ports import CheckpointRecord, CheckpointWrite, Outcome, TurnWrites, Waiter
from durable.engine.vocab import (
    EVENT_TOKEN,
    RUN_TOKEN,
    TERMINAL,
    WAIT_KINDS,
    Admission,
    CheckpointKind,
    CheckpointStatus,
    RunStatus,
)

# Checkpoint columns an update may change (identity and dispatch fields stay as inserted).
CHECKPOINT_UPDATABLE: tuple[str, ...] = tuple(
    name
    for name in CheckpointRecord.__dataclass_fields__
    if name not in ("seq", "name", "kind", "queue", "queue_key", "admission", "priority", "enqueued_at", "input")
)
# Columns an update leaves as stored when the record has them unset (falsy).
KEEP_IF_UNSET: tuple[str, ...] = ("started_at", "attempts")


class Shape(StrEnum):
    """How a commit plan can be executed.

    ``BATCH``: one statement, and plans with the same :attr:`CommitPlan.batch_key`
    may share one (``Store.commit_many``): the run row and its checkpoints.
    ``STATEMENT``: one statement of its own, which may also check step claims,
    delete consumed signals and clear the run's waiter rows. ``TRANSACTION``:
    several statements in one transaction (waiters registered by a suspension,
    inserted or cancelled runs, a continue-as-new successor, a lifecycle owed,
    a singleton slot handed over).
    """

    BATCH = "batch"
    STATEMENT = "statement"
    TRANSACTION = "transaction"


@dataclass(frozen=True)
class LeaseCheck:
    """The compare-and-set condition of a lease holder's write: the run row must match it."""

    run_id: str
    owner: str
    status: RunStatus = RunStatus.RUNNING


@dataclass(frozen=True)
class CancelWake:
    """A suspension's wake, decided on the locked row: ``now`` if ``cancel_requested``, else ``wake_at``."""

    now: datetime
    wake_at: datetime | None


@dataclass(frozen=True)
class RunChange:
    """The run row's column changes (``sets``, plus ``cancel_wake``), written only where ``lease`` matches.

    With nothing to change (:attr:`lock_only`) the row is still locked, which
    serialises the commit with a cancel or a takeover; an executor that can
    only lock by writing renews the lease to ``lease_until``.
    """

    lease: LeaseCheck
    sets: Mapping[str, Any]
    cancel_wake: CancelWake | None
    lease_until: datetime

    @property
    def lock_only(self) -> bool:
        return not self.sets and self.cancel_wake is None


@dataclass(frozen=True)
class CheckpointChange:
    """Update checkpoint ``seq`` while its status is in ``expect``.

    ``values`` holds every updatable column; those in ``keep`` are left as
    stored (the record had them unset). ``claimed_by``: the update settles a
    step this process claimed; it must still be claimed by that owner, else
    the whole commit is refused.
    """

    seq: int
    values: Mapping[str, Any]
    keep: tuple[str, ...]
    expect: tuple[str, ...]
    claimed_by: str | None = None

    def written(self) -> dict[str, Any]:
        """The columns this update writes."""
        return {name: value for name, value in self.values.items() if name not in self.keep}


@dataclass(frozen=True)
class WaiterChange:
    """The run's waiter rows: cleared (``clear``), then ``add`` inserted (created at the commit's ``now``).

    ``recheck_waiters``: after registering, ask whether what they wait for
    already happened (buffered signal, settled run, buffered event) and mark
    awaited runs; the sender takes the same lock, so nothing is lost between.
    """

    clear: bool
    add: tuple[Waiter, ...]
    recheck_waiters: bool


@dataclass(frozen=True)
class AfterCommit:
    """Work that follows a written commit.

    ``wake_tokens``: wake the suspended runs waiting on these tokens (a
    terminal run's waiters). ``only_if_awaited``: they name this run alone,
    so an executor that knows the run was never awaited may skip them.
    ``wake_cancelled``: wake the waiters of the runs the commit cancelled.
    """

    wake_tokens: tuple[str, ...] = ()
    only_if_awaited: bool = False
    wake_cancelled: bool = False


@dataclass(frozen=True)
class CommitPlan:
    """Every row change of one commit (a turn's final commit, or a flush when ``final`` is false).

    Executed in this order, in one transaction or statement: lock ``event_locks``
    (sorted), apply ``run`` under its lease (nothing else happens if it fails),
    insert ``new_runs`` (idempotent on id; a continue-as-new successor first),
    insert ``inserts``, apply ``updates``, delete ``consumed_signals``, cancel
    ``cancel_runs`` with their active descendants, apply ``waiters``, then (a
    suspension) wake the run at once if a checkpoint in ``recheck`` settled.
    """

    run: RunChange
    now: datetime
    final: bool
    status: RunStatus | None
    inserts: tuple[CheckpointRecord, ...]
    updates: tuple[CheckpointChange, ...]
    new_runs: tuple[dict[str, Any], ...]
    consumed_signals: tuple[int, ...]
    cancel_runs: tuple[str, ...]
    event_locks: tuple[str, ...]
    waiters: WaiterChange | None
    recheck: tuple[int, ...]
    after: AfterCommit
    shape: Shape
    # Limited queues this commit writes waiting steps into: their queue rows are rewritten in the
    # same write, so a step result that reads the queue concurrently sees that it may have missed
    # them (durable.store.queue_statements); never part of a shared statement.
    waited_queues: tuple[str, ...] = ()

    @property
    def suspends(self) -> bool:
        return self.status == RunStatus.SUSPENDED

    @property
    def asked_wake(self) -> datetime | None:
        """The wake a suspension asked for (the written one may be sooner)."""
        if not self.suspends:
            return None
        if self.run.cancel_wake is not None:
            return self.run.cancel_wake.wake_at
        wake: datetime | None = self.run.sets.get("wake_at")
        return wake

    @property
    def batch_key(self) -> tuple[Any, ...]:
        """Plans with equal keys (and :attr:`Shape.BATCH`) can share one statement."""
        return (self.run.lease.owner, tuple(self.run.sets), self.run.cancel_wake is not None)


def checkpoint_change(write: CheckpointWrite) -> CheckpointChange:
    """The conditional update a non-creating :class:`CheckpointWrite` asks for."""
    values = {name: getattr(write.record, name) for name in CHECKPOINT_UPDATABLE}
    keep = tuple(name for name in KEEP_IF_UNSET if not values[name])
    return CheckpointChange(write.record.seq, values, keep, tuple(write.expect), write.claimed_by)


def _final_sets(now: datetime, outcome: Outcome) -> tuple[dict[str, Any], CancelWake | None]:
    """The run columns a final commit writes, and the suspension's cancel-aware wake."""
    sets: dict[str, Any] = {"status": outcome.status, "updated_at": now, "locked_by": None, "locked_until": None}
    if outcome.status == RunStatus.SUSPENDED:
        if outcome.cancel_seen:
            sets["wake_at"] = outcome.wake_at
            return sets, None
        # A cancel-with-undo that arrived during the turn must not wait for the timer.
        return sets, CancelWake(now, outcome.wake_at)
    if outcome.status == RunStatus.BLOCKED:
        sets.update(wake_at=None, error=outcome.error)
        return sets, None
    sets.update(wake_at=None, finished_at=now, output=outcome.output, error=outcome.error)
    if outcome.next_run is not None:
        sets["continued_to"] = outcome.next_run["id"]
    if outcome.lifecycle is not None:
        # Whom the lifecycle event is owed to, in the same write as the status.
        sets.update(lifecycle=outcome.lifecycle, lifecycle_owed=True)
    return sets, None


def awaiting_steps(writes: TurnWrites, outcome: Outcome) -> int | None:
    """How many dispatched steps a suspension waits on, when it knows them all unsettled; else ``None``.

    Every dispatched step a turn creates is waited on by the suspension that
    ends it (a step call and a gather both suspend until their steps
    settle), and none of them can have a result before this commit (they
    are dispatched after it). A step the replay found in flight may have
    settled while the turn ran: then the count is unknown (``None``) and
    every result wakes the run, as does any result when it is ``None``.
    """
    if outcome.step_seqs:
        return None
    created = sum(
        1
        for w in writes.checkpoints
        if w.create and w.record.kind == CheckpointKind.STEP and w.record.status == CheckpointStatus.PENDING
    )
    return created or None


def _waits(writes: TurnWrites) -> bool:
    """Does the commit settle or start a wait (so the run's waiter rows change)?"""
    return bool(writes.consumed_signals) or any(w.record.kind in WAIT_KINDS for w in writes.checkpoints)


def _shape(writes: TurnWrites, outcome: Outcome | None, waited_queues: tuple[str, ...]) -> Shape:
    """The shape of a commit; see :class:`Shape` for what each one may contain.

    A suspension that registers waiters stays a transaction: its re-check of
    what they wait for (a buffered signal or event, a settled run) must read
    after taking the lock the sender takes, and one statement reads only its
    own snapshot, taken before any lock wait.
    """
    if writes.new_runs or writes.cancel_runs:
        return Shape.TRANSACTION
    if outcome is not None:
        if outcome.waiters or outcome.next_run is not None or outcome.lifecycle or outcome.slot:
            return Shape.TRANSACTION
        if _waits(writes) or outcome.had_waiters:
            return Shape.STATEMENT  # its waiter rows are cleared: a statement of its own
    elif writes.consumed_signals:
        return Shape.STATEMENT
    if waited_queues:
        return Shape.STATEMENT  # it rewrites queue rows: a statement of its own
    return Shape.STATEMENT if any(w.claimed_by for w in writes.checkpoints) else Shape.BATCH


def _waited_queues(writes: TurnWrites) -> tuple[str, ...]:
    """The queues of the steps this commit creates waiting for admission (sorted: rows locked in order)."""
    return tuple(
        sorted(
            {
                w.record.queue
                for w in writes.checkpoints
                if w.create and w.record.admission == Admission.WAITING and w.record.queue
            }
        )
    )


def _waiter_change(writes: TurnWrites, outcome: Outcome) -> WaiterChange | None:
    waiters = tuple(outcome.waiters)
    clear = bool(waiters) or _waits(writes) or outcome.had_waiters
    if not clear:
        return None
    return WaiterChange(clear, waiters, recheck_waiters=bool(waiters) and outcome.status == RunStatus.SUSPENDED)


def _after(outcome: Outcome, cancel_runs: Sequence[str]) -> AfterCommit:
    tokens = tuple(outcome.notify) if outcome.status in TERMINAL else ()
    # Nobody can wait for a run that was never awaited; a retry's waiters wait on the original run.
    return AfterCommit(tokens, only_if_awaited=len(tokens) == 1, wake_cancelled=bool(cancel_runs))


def plan_commit(
    run_id: str,
    owner: str,
    now: datetime,
    lease_until: datetime,
    writes: TurnWrites,
    outcome: Outcome | None = None,
) -> CommitPlan:
    """The plan of ``Store.commit``: a flush (``outcome`` None) or a turn's final commit.

    A flush changes only the run's own columns (``writes.run_fields``) and
    leaves the lease's expiry to the keeper. A final commit also writes the
    outcome and releases the lease in the same write.
    """
    sets: dict[str, Any] = dict(writes.run_fields)
    cancel_wake = None
    if outcome is not None:
        final, cancel_wake = _final_sets(now, outcome)
        sets.update(final)
        if outcome.status == RunStatus.SUSPENDED:
            sets["awaiting_steps"] = awaiting_steps(writes, outcome)
    suspends = outcome is not None and outcome.status == RunStatus.SUSPENDED
    new_runs = ([outcome.next_run] if outcome is not None and outcome.next_run is not None else []) + writes.new_runs
    waiters = list(outcome.waiters) if outcome is not None else []
    waited = _waited_queues(writes)
    return CommitPlan(
        run=RunChange(LeaseCheck(run_id, owner), sets, cancel_wake, lease_until),
        now=now,
        final=outcome is not None,
        status=RunStatus(outcome.status) if outcome is not None else None,
        inserts=tuple(w.record for w in writes.checkpoints if w.create),
        updates=tuple(checkpoint_change(w) for w in writes.checkpoints if not w.create),
        new_runs=tuple(new_runs),
        consumed_signals=tuple(writes.consumed_signals),
        cancel_runs=tuple(writes.cancel_runs),
        event_locks=tuple(sorted({w.token[len(EVENT_TOKEN) :] for w in waiters if w.token.startswith(EVENT_TOKEN)})),
        waiters=_waiter_change(writes, outcome) if outcome is not None else None,
        recheck=tuple([w.seq for w in waiters] + outcome.step_seqs) if suspends and outcome is not None else (),
        after=_after(outcome, writes.cancel_runs) if outcome is not None else AfterCommit(),
        shape=_shape(writes, outcome, waited),
        waited_queues=waited,
    )


def plan_flush(run_id: str, owner: str, now: datetime, lease_until: datetime, writes: TurnWrites) -> CommitPlan:
    """The plan of a mid-turn flush (deferred writes committed before a side effect)."""
    return plan_commit(run_id, owner, now, lease_until, writes)


@dataclass(frozen=True)
class PagePlan:
    """How a page of final commits goes to the database.

    ``batches``: positions of plans that share one statement each (two or
    more, same owner and shape). ``alone``: positions committed one by one.
    """

    batches: tuple[tuple[int, ...], ...]
    alone: tuple[int, ...]


def plan_page(plans: Sequence[CommitPlan]) -> PagePlan:
    """Group a page's final commits by the statement they can share."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    alone: list[int] = []
    for i, plan in enumerate(plans):
        if plan.shape == Shape.BATCH and plan.final:
            groups.setdefault(plan.batch_key, []).append(i)
        else:
            alone.append(i)
    batches = tuple(tuple(group) for group in groups.values() if len(group) > 1)
    alone += [group[0] for group in groups.values() if len(group) == 1]
    return PagePlan(batches, tuple(sorted(alone)))


def waiter_runs(waiters: Sequence[Waiter]) -> list[str]:
    """The runs that waiters on run tokens wait for."""
    return [w.token[len(RUN_TOKEN) :] for w in waiters if w.token.startswith(RUN_TOKEN)]


def waiter_signals(waiters: Sequence[Waiter]) -> list[str]:
    """The user signal names among the waiters' tokens."""
    return [w.token for w in waiters if not w.token.startswith((RUN_TOKEN, EVENT_TOKEN))]


def waiter_events(waiters: Sequence[Waiter]) -> list[tuple[str, dict[str, Any] | None]]:
    """The event names (with their match) among the waiters' tokens."""
    return [(w.token[len(EVENT_TOKEN) :], w.match) for w in waiters if w.token.startswith(EVENT_TOKEN)]
