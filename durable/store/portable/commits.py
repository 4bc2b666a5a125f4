"""A turn's atomic commit, executed from its plan with the ORM (checkpoints, waiters, settle).

:func:`durable.engine.plan.plan_commit` decides what a commit writes; this
executes it in one transaction, run row first: the lease compare-and-set
(and every step claim the plan checks) decides everything, and when it
matches nothing the transaction is rolled back, so a turn that lost its run
writes nothing at all. Timestamps are the plan's ``now``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, DateTimeField, Value, When

from durable.engine.plan import CommitPlan, RunChange, plan_commit, waiter_events, waiter_runs, waiter_signals
from durable.engine.ports import REFUSED, CommitResult, Outcome, TurnWrites, Waiter
from durable.engine.vocab import RUN_TOKEN, SETTLED, TERMINAL, RunStatus
from durable.models import BufferedEvent, BufferedSignal, Checkpoint, Queue, Run, SignalWaiter
from durable.store.portable.shared import LeaseGone, StoreBase, matches


class CommitRows(StoreBase):
    def commit(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        writes: TurnWrites,
        outcome: Outcome | None = None,
    ) -> CommitResult:
        """Write a turn's checkpoints (and, with ``outcome``, settle the run) atomically.

        What is written is :func:`durable.engine.plan.plan_commit`'s plan. The
        compare-and-set on the lease decides everything: when it matches
        nothing the turn has lost the run and nothing at all is written.
        Settling releases the lease in that same statement. A continue-as-new
        successor is inserted in this transaction too, before the current run
        completes.

        Waiters registered by a suspension re-check what they wait for inside
        this transaction, after taking the lock the sender also takes (the run
        row for signals, the awaited run's row for runs, an advisory lock per
        name for events), so a concurrent signal, result or event is never
        lost between the turn's read and its registration. Runs waiting on
        this one are woken after commit (``CommitResult.woken``).

        A singleton run's terminal outcome (``outcome.slot``) hands its slot
        over in the same transaction: the oldest waiting runs of its key are
        admitted, and returned among the woken runs to dispatch.
        """
        plan = plan_commit(run_id, owner, now, lease_until, writes, outcome)
        if outcome is None or outcome.slot is None:
            return self.execute_commit(plan)
        with transaction.atomic():
            result = self.execute_commit(plan)
            if not result.written:
                return result
            admitted = self.hand_over(*outcome.slot, now)
        return replace(result, woken=result.woken + tuple(admitted))

    def execute_commit(self, plan: CommitPlan) -> CommitResult:
        """Execute a commit plan in one transaction; see :meth:`commit`."""
        try:
            with transaction.atomic():
                for name in plan.event_locks:
                    self._lock_event(name)
                self._write_run(plan.run, plan.now)
                cancelled = self._apply(plan)
                poked = self._settle_waiters(plan)
                wake = plan.now if poked else self._wake_as_written(plan)
        except LeaseGone:
            return REFUSED
        return self._committed(plan, cancelled, wake, True)

    @staticmethod
    def _wake_as_written(plan: CommitPlan) -> datetime | None:
        """The run's wake as this transaction wrote it: ``now``, not the timer, when a cancel with undo arrived."""
        if plan.run.cancel_wake is None:
            return plan.asked_wake
        written: datetime | None = (
            Run.objects.filter(id=plan.run.lease.run_id).values_list("wake_at", flat=True).first()
        )
        return written

    def _committed(
        self, plan: CommitPlan, cancelled: list[str], wake_at: datetime | None, awaited: bool
    ) -> CommitResult:
        """After a written commit: wake the runs it concerns; the result the turn reads."""
        if not plan.final:
            return CommitResult(written=True)
        after = plan.after
        tokens = [RUN_TOKEN + rid for rid in cancelled] if after.wake_cancelled else []
        # The awaited flag is set under this row's lock by any waiter's commit.
        if after.wake_tokens and (awaited or not after.only_if_awaited):
            tokens += after.wake_tokens
        woken = tuple(self._wake_waiters(tokens, plan.now)) if tokens else ()
        return CommitResult(
            written=True, woken=woken, wake_at=wake_at if plan.suspends else None, cancelled=tuple(cancelled)
        )

    def commit_many(
        self, commits: list[tuple[str, str, datetime, datetime, TurnWrites, Outcome]]
    ) -> list[CommitResult | Exception]:
        """Final commits of several turns, each as :meth:`commit` would make it, written together.

        A store that can share statements writes the plans that
        :func:`durable.engine.plan.plan_page` groups in one statement per
        group (:meth:`_commit_shared`); each run's part is still conditional
        on its own lease, so one lost lease refuses that run's commit alone.
        The others are committed one by one. Each result is :meth:`commit`'s,
        or the exception that run's own commit raised; this does not raise.
        """
        shared = self._commit_shared([plan_commit(*c) for c in commits])
        return [shared[i] if i in shared else self._commit_alone(c) for i, c in enumerate(commits)]

    def _commit_shared(self, plans: list[CommitPlan]) -> dict[int, CommitResult | Exception]:
        """Results of the plans committed in shared statements, by position (here: none)."""
        return {}

    def _commit_alone(
        self, commit: tuple[str, str, datetime, datetime, TurnWrites, Outcome]
    ) -> CommitResult | Exception:
        try:
            return self.commit(*commit)
        except Exception as exc:  # noqa: BLE001 - reported for this run alone
            return exc

    def _write_run(self, change: RunChange, now: datetime) -> None:
        """The run's columns under the lease compare-and-set; :class:`LeaseGone` when it matched nothing."""
        fields: dict[str, Any] = dict(change.sets)
        if change.cancel_wake is not None:
            fields["wake_at"] = Case(
                When(cancel_requested=True, then=Value(change.cancel_wake.now)),
                default=Value(change.cancel_wake.wake_at),
                output_field=DateTimeField(),
            )
        if change.lock_only:
            # The ORM locks a row only by writing it: renew the lease, which the keeper would anyway.
            fields["locked_until"] = change.lease_until
        lease = change.lease
        if not Run.objects.filter(id=lease.run_id, status=lease.status, locked_by=lease.owner).update(**fields):
            raise LeaseGone()

    def _settle_waiters(self, plan: CommitPlan) -> bool:
        """Replace the run's waiters; True when the suspended run was woken at once (``now``)."""
        run_id, now, change = plan.run.lease.run_id, plan.now, plan.waiters
        if change is not None and change.clear:
            SignalWaiter.objects.filter(run_id=run_id).delete()
        if change is not None and change.add:
            SignalWaiter.objects.bulk_create(
                [
                    SignalWaiter(run_id=run_id, name=w.token, seq=w.seq, match=w.match, created_at=now)
                    for w in change.add
                ]
            )
        if not plan.suspends:
            return False
        # A step result or event that settled a checkpoint while the turn ran (we hold the run
        # row, which finish_step takes first) would otherwise wait for the reconcile.
        settled = (
            bool(plan.recheck)
            and Checkpoint.objects.filter(run_id=run_id, seq__in=plan.recheck, status__in=SETTLED).exists()
        )
        # Always asked when there are waiters (not only when nothing settled): it also marks
        # awaited runs, whose completion then knows to look for waiters.
        there = change is not None and change.recheck_waiters and self._already_there(run_id, change.add)
        if settled or there:
            Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now)
            return True
        return False

    def _already_there(self, run_id: str, waiters: Sequence[Waiter]) -> bool:
        """Did what these waiters wait for happen before they were registered?

        Awaited runs are marked first, under their row locks, whatever else is found.
        """
        runs = waiter_runs(waiters)
        done = False
        if runs:
            # Row locks serialise with the awaited run's own settle: either it committed
            # first (we see it terminal) or it commits after us (and sees our waiter).
            # The update takes those row locks and marks the runs awaited (their completion
            # then knows to look for waiters); the read after it sees their latest status.
            Run.objects.filter(id__in=runs).update(awaited=True)
            statuses = Run.objects.filter(id__in=runs).values_list("status", flat=True)
            done = any(status in TERMINAL for status in statuses)
        signals = waiter_signals(waiters)
        if done or (signals and BufferedSignal.objects.filter(run_id=run_id, name__in=signals).exists()):
            return True
        for name, match in waiter_events(waiters):
            buffered = BufferedEvent.objects.filter(name=name, consumed=False).values_list("payload", flat=True)
            if any(matches(match, payload) for payload in buffered[:500]):
                return True
        return False

    def _apply(self, plan: CommitPlan) -> list[str]:
        """Everything of the plan beyond the run row; returns the runs cancelled."""
        run_id = plan.run.lease.run_id
        if plan.new_runs:
            self._insert_runs(list(plan.new_runs))
        if plan.inserts:
            Checkpoint.objects.bulk_create([Checkpoint(run_id=run_id, **asdict(rec)) for rec in plan.inserts])
        if plan.waited_queues:  # a new version of each queue row (see durable.store.queue_statements)
            Queue.objects.filter(name__in=plan.waited_queues).update(updated_at=plan.now)
        for change in plan.updates:
            target = Checkpoint.objects.filter(run_id=run_id, seq=change.seq, status__in=change.expect)
            if change.claimed_by is not None:
                if not target.filter(locked_by=change.claimed_by).update(**change.written()):
                    raise LeaseGone()  # the claim was taken from us: the turn cannot stand
                continue
            target.update(**change.written())
        if plan.consumed_signals:
            BufferedSignal.objects.filter(run_id=run_id, id__in=plan.consumed_signals).delete()
        if plan.cancel_runs:
            return self._cancel_tree(list(plan.cancel_runs), plan.now)
        return []
