"""Runs: creation, leases, signals, cancellation and repairs, as the portable store writes them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Min

from durable.engine.ports import CancelResult, RunRecord
from durable.engine.vocab import ACTIVE, RESETTABLE, RUN_TOKEN, TERMINAL, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidRunState, RunNotFound
from durable.models import BufferedSignal, Checkpoint, Run, SignalWaiter
from durable.store.portable.shared import StoreBase, new_run_record, run_record, ts
from durable.store.statements import ACQUIRE

# Runs that cannot execute an undo (blocked, or queued and never started): a cancel ends them outright.
_IDLE = (RunStatus.BLOCKED, RunStatus.QUEUED)


class RunRows(StoreBase):
    def create_run(self, fields: dict[str, Any]) -> bool:
        """Insert the run unless one with that id exists (idempotent start); True if inserted.

        One statement (``INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id``):
        concurrent callers are decided by the primary key, and a loser on
        PostgreSQL waits for the winner's transaction before learning it lost.
        A run of a singleton workflow is admitted to its key instead (:meth:`admit_run`).
        """
        if fields.get("singleton_key") is not None:
            return self._admit_new_run(fields)
        return bool(self._execute(self._start_statement(), self._start_params(fields)))

    def _admit_new_run(self, fields: dict[str, Any]) -> bool:
        with transaction.atomic():
            return self._admit_new(fields, None, fields["created_at"]).created

    def create_leased_run(
        self, fields: dict[str, Any], owner: str, now: datetime, lease_until: datetime
    ) -> RunRecord | None:
        """Insert the run already leased to ``owner`` for its first turn; None if the id exists.

        The same single idempotent statement as :meth:`create_run`; the run
        starts ``running`` (turn 1) instead of ``pending``.
        """
        leased = {
            **fields,
            "status": RunStatus.RUNNING,
            "locked_by": owner,
            "locked_until": lease_until,
            "turns": 1,
            "started_at": now,
            "updated_at": now,
        }
        if not self.create_run(leased):
            return None
        return new_run_record(leased)

    def acquire(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        """Take the lease of a pending run, or of a suspended run whose wake is due.

        One compare-and-set statement that returns the run as it now is.
        """
        params = [RunStatus.RUNNING, owner, ts(lease_until), ts(now), ts(now), run_id]
        rows = list(Run.objects.raw(ACQUIRE, [*params, RunStatus.PENDING, RunStatus.SUSPENDED, ts(now)]))
        return run_record(rows[0]) if rows else None

    def renew_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> bool:
        return bool(
            Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(locked_until=lease_until)
        )

    def transaction_depth(self) -> int:
        """The ``atomic`` blocks this thread's default connection is inside."""
        return len(connection.atomic_blocks)

    def lease_held(self, run_id: str, owner: str) -> bool:
        """Does ``owner`` still hold the run's lease (not cancelled, not taken over)? A read."""
        return Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).exists()

    def release(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        wake_at: datetime,
        count_recovery: bool,
        max_attempts: int | None = None,
    ) -> str | None:
        """Hand a running run back (suspended, due at ``wake_at``) without an outcome.

        With ``count_recovery`` the handback counts as a recovery; past
        ``max_attempts`` the run goes ``dead`` instead. Returns the status
        written, or None when the lease was no longer ours.
        """
        mine = Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner)
        if count_recovery and max_attempts is not None:
            dead = mine.filter(recovery_attempts__gte=max_attempts).update(
                status=RunStatus.DEAD,
                error={
                    "message": f"the run's turn failed {max_attempts + 1} times in a row; giving up",
                    "code": "max_recovery_attempts",
                    "retryable": False,
                    "type": "Dead",
                    "traceback": None,
                },
                recovery_attempts=F("recovery_attempts") + 1,
                finished_at=now,
                updated_at=now,
                wake_at=None,
                locked_by=None,
                locked_until=None,
            )
            if dead:
                return RunStatus.DEAD
        fields: dict[str, Any] = dict(
            status=RunStatus.SUSPENDED,
            wake_at=wake_at,
            locked_by=None,
            locked_until=None,
            updated_at=now,
            awaiting_steps=None,  # a handback knows nothing of what the run waits on: every result wakes it
        )
        if count_recovery:
            fields["recovery_attempts"] = F("recovery_attempts") + 1
        return RunStatus.SUSPENDED if mine.update(**fields) else None

    def block(self, run_id: str, owner: str, now: datetime, reason: dict[str, Any]) -> bool:
        return bool(
            Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(
                status=RunStatus.BLOCKED, error=reason, locked_by=None, locked_until=None, updated_at=now
            )
        )

    def unblock(self, run_ids: Iterable[str], now: datetime) -> int:
        return Run.objects.filter(id__in=list(run_ids), status=RunStatus.BLOCKED).update(
            status=RunStatus.PENDING, error=None, updated_at=now
        )

    def signal(self, run_id: str, name: str, payload: Any, now: datetime) -> bool:
        """Buffer a signal and wake the run if it waits for that name. Returns True if woken."""
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status in TERMINAL:
                raise InvalidRunState(f"run {run_id!r} is {status}; it takes no more signals")
            BufferedSignal.objects.create(run_id=run_id, name=name, payload=payload, created_at=now)
            if SignalWaiter.objects.filter(run_id=run_id, name=name).exists():
                woken = Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now, updated_at=now)
                if woken:
                    self._announce([run_id])
                return bool(woken)
        return False

    def cancel(self, run_id: str, now: datetime, compensate: bool = False) -> CancelResult:
        """Cancel an active run and, recursively, its active children.

        Returns what it did (:class:`~durable.engine.ports.CancelResult`).
        With ``compensate`` the runs are not stopped here: they are marked and
        woken so their next turn undoes their completed steps and ends
        ``cancelled`` (a blocked or queued run, which cannot execute, is cancelled
        outright). The slots of singleton runs it cancelled go to their keys'
        next waiting runs in the same transaction (returned among ``woken``).
        """
        woken: list[str] = []
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in ACTIVE:
                return CancelResult(False)
            if not compensate or status in _IDLE:
                cancelled = self._cancel_tree([run_id], now)
            else:
                tree = self._subtree([run_id])
                Run.objects.filter(id__in=tree, status__in=ACTIVE).exclude(status__in=_IDLE).update(
                    cancel_requested=True, updated_at=now
                )
                Run.objects.filter(id__in=tree, status=RunStatus.SUSPENDED).update(wake_at=now)
                cancelled = self._cancel_tree(
                    list(Run.objects.filter(id__in=tree, status__in=_IDLE).values_list("id", flat=True)), now
                )
                woken = tree
            if cancelled and status != RunStatus.QUEUED:
                # (A queued run held no slot, and has no children: nothing to hand over, no slot lock to take.)
                woken += self._hand_over_runs(cancelled, now)
        if cancelled:
            woken += self._wake_waiters([RUN_TOKEN + rid for rid in cancelled], now)
        return CancelResult(True, tuple(woken), tuple(cancelled))

    def notify_settled(self, run_id: str, now: datetime) -> list[str]:
        """Wake runs waiting on ``run_id`` (or on the run it retries) after it settled outside a turn."""
        found = Run.objects.filter(id=run_id).values_list("retry_of", "workflow", "singleton_key").first()
        retry_of, workflow, key = found if found is not None else (None, "", None)
        tokens = [RUN_TOKEN + run_id] + ([RUN_TOKEN + retry_of] if retry_of else [])
        # A singleton run that settled outside a turn (dead, timed out) frees its slot here.
        admitted = self.hand_over(workflow, key, now) if key is not None else []
        return self._wake_waiters(tokens, now) + admitted

    def wake(self, run_ids: list[str], now: datetime) -> None:
        if run_ids:
            Run.objects.filter(id__in=run_ids, status=RunStatus.SUSPENDED).update(wake_at=now)

    def requeue(self, run_id: str, now: datetime, deadline_at: datetime | None) -> list[str]:
        """Put a failed or dead run back to ``pending`` so it really runs again.

        History from the first failed step or child onwards is dropped
        (everything after it was decided by that failure), so replay executes
        it afresh instead of replaying its failure. Completed checkpoints before
        it, including a late success that landed after the run failed, are
        kept. Failed children it awaited are requeued too, recursively. The
        recovery count starts again from zero. A run of a singleton workflow
        queues for its key again, behind the runs already waiting (admitted at
        once if a slot is free). Returns the ids requeued.
        """
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in (RunStatus.FAILED, RunStatus.DEAD):
                raise InvalidRunState(f"run {run_id!r} is {status}; only failed or dead runs can be requeued")
            return self._requeue(run_id, now, {"deadline_at": deadline_at})

    def _requeue(self, run_id: str, now: datetime, extra: dict[str, Any]) -> list[str]:
        failed = Checkpoint.objects.filter(run_id=run_id, status=CheckpointStatus.FAILED, kind__in=RESETTABLE)
        first_failed = failed.aggregate(m=Min("seq"))["m"]
        requeued = [run_id]
        if first_failed is not None:
            dropped = Checkpoint.objects.filter(run_id=run_id, seq__gte=first_failed)
            children = [
                (row or {}).get("run_id")
                for row in dropped.filter(kind=CheckpointKind.CHILD, status=CheckpointStatus.FAILED).values_list(
                    "input", flat=True
                )
            ]
            dropped.delete()
            for child_id in children:
                if child_id and Run.objects.filter(id=child_id, status__in=(RunStatus.FAILED, RunStatus.DEAD)).exists():
                    requeued += self._requeue(child_id, now, {})
        Run.objects.filter(id=run_id, status__in=(RunStatus.FAILED, RunStatus.DEAD)).update(
            status=RunStatus.PENDING,
            error=None,
            output=None,
            finished_at=None,
            wake_at=None,
            locked_by=None,
            locked_until=None,
            recovery_attempts=0,
            cancel_requested=False,
            updated_at=now,
            **extra,
        )
        self._readmit(run_id, now)
        return requeued

    def pending_steps(self, run_id: str, now: datetime, new_wake: datetime) -> list[tuple[int, str | None]]:
        """Mark every pending dispatched step of an active run for re-dispatch; return them."""
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in ACTIVE:
                raise InvalidRunState(f"run {run_id!r} is {status}; its steps are not dispatched any more")
            # A limited queue's steps are sent by their admission only (never re-sent here).
            pending = Checkpoint.objects.filter(
                run_id=run_id, kind=CheckpointKind.STEP, status=CheckpointStatus.PENDING, admission__isnull=True
            )
            rows = list(pending.values_list("seq", "queue"))
            pending.update(wake_at=new_wake, retry_at=None, dispatches=F("dispatches") + 1)
        return rows
