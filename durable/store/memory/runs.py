"""Runs in memory: creation, leases, signals, cancellation, repairs and reads."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from durable.engine.ports import CancelResult, RunRecord
from durable.engine.vocab import ACTIVE, RESETTABLE, RUN_TOKEN, TERMINAL, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidRunState, RunNotFound
from durable.store.memory.base import MemoryBase, atomically, dead_letter, locked
from durable.store.memory.tables import Row, as_json, run_record

_REQUEUEABLE = (RunStatus.FAILED, RunStatus.DEAD)
# Runs that cannot execute an undo (blocked, or queued and never started): a cancel ends them outright.
_IDLE = (RunStatus.BLOCKED, RunStatus.QUEUED)


class RunsPart(MemoryBase):
    @atomically
    def create_run(self, fields: dict[str, Any]) -> bool:
        """Insert the run unless one with that id exists (idempotent start); True if inserted.

        A run of a singleton workflow is admitted to its key (pending or queued).
        """
        return bool(self._insert_runs([fields]))

    @atomically
    def create_leased_run(
        self, fields: dict[str, Any], owner: str, now: datetime, lease_until: datetime
    ) -> RunRecord | None:
        """Insert the run already leased to ``owner`` for its first turn; None if the id exists."""
        leased = {
            **fields,
            "status": RunStatus.RUNNING,
            "locked_by": owner,
            "locked_until": lease_until,
            "turns": 1,
            "started_at": now,
            "updated_at": now,
        }
        if not self._insert_runs([leased]):
            return None
        return run_record(self.tables.runs[fields["id"]])

    @locked
    def get_run(self, run_id: str) -> RunRecord | None:
        row = self.tables.runs.get(run_id)
        return run_record(row) if row is not None else None

    @atomically
    def acquire(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        """Take the lease of a pending run, or of a suspended run whose wake is due."""
        row = self.tables.runs.get(run_id)
        if row is None or not self._due(row, now):
            return None
        self._take(row, owner, now, lease_until)
        return run_record(row)

    @staticmethod
    def _due(row: Row, now: datetime) -> bool:
        if row["status"] == RunStatus.PENDING:
            return True
        return row["status"] == RunStatus.SUSPENDED and row["wake_at"] is not None and row["wake_at"] <= now

    def _take(self, row: Row, owner: str, now: datetime, lease_until: datetime) -> None:
        """The lease write of every acquire: running, ours, one more turn."""
        self.tables.set(
            row,
            status=RunStatus.RUNNING,
            locked_by=owner,
            locked_until=lease_until,
            updated_at=now,
            started_at=row["started_at"] or now,
            turns=row["turns"] + 1,
        )

    @atomically
    def renew_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> bool:
        row = self._held(run_id, owner)
        if row is not None:
            self.tables.set(row, locked_until=lease_until)
        return row is not None

    @locked
    def lease_held(self, run_id: str, owner: str) -> bool:
        """Does ``owner`` still hold the run's lease (not cancelled, not taken over)?"""
        return self._held(run_id, owner) is not None

    @atomically
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
        row = self._held(run_id, owner)
        if row is None:
            return None
        attempts = row["recovery_attempts"] + (1 if count_recovery else 0)
        if count_recovery and max_attempts is not None and row["recovery_attempts"] >= max_attempts:
            error = dead_letter(f"the run's turn failed {max_attempts + 1} times in a row; giving up")
            self._release(
                row, now, RunStatus.DEAD, error=error, recovery_attempts=attempts, finished_at=now, wake_at=None
            )
            return RunStatus.DEAD
        self._release(row, now, RunStatus.SUSPENDED, wake_at=wake_at, recovery_attempts=attempts, awaiting_steps=None)
        return RunStatus.SUSPENDED

    @atomically
    def block(self, run_id: str, owner: str, now: datetime, reason: dict[str, Any]) -> bool:
        row = self._held(run_id, owner)
        if row is not None:
            self._release(row, now, RunStatus.BLOCKED, error=as_json(reason))
        return row is not None

    @atomically
    def unblock(self, run_ids: Iterable[str], now: datetime) -> int:
        rows = self._runs_with(run_ids, (RunStatus.BLOCKED,))
        for row in rows:
            self.tables.set(row, status=RunStatus.PENDING, error=None, updated_at=now)
        return len(rows)

    def _status_of(self, run_id: str) -> str:
        row = self.tables.runs.get(run_id)
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        status: str = row["status"]
        return status

    @atomically
    def signal(self, run_id: str, name: str, payload: Any, now: datetime) -> bool:
        """Buffer a signal and wake the run if it waits for that name. Returns True if woken."""
        status = self._status_of(run_id)
        if status in TERMINAL:
            raise InvalidRunState(f"run {run_id!r} is {status}; it takes no more signals")
        signal_id = self.tables.next_id()
        row = {"id": signal_id, "run_id": run_id, "name": name, "payload": as_json(payload), "created_at": now}
        self.tables.put(self.tables.signals, signal_id, row)
        if not any(w["run_id"] == run_id and w["name"] == name for w in self.tables.waiters.values()):
            return False
        run = self.tables.runs[run_id]
        if run["status"] != RunStatus.SUSPENDED:
            return False
        self.tables.set(run, wake_at=now, updated_at=now)
        return True

    @atomically
    def cancel(self, run_id: str, now: datetime, compensate: bool = False) -> CancelResult:
        """Cancel an active run and, recursively, its active children.

        Returns what it did (:class:`~durable.engine.ports.CancelResult`).
        With ``compensate`` the runs are marked and woken so their next turn
        undoes their completed steps (a blocked run is cancelled outright).
        """
        status = self._status_of(run_id)
        if status not in ACTIVE:
            return CancelResult(False)
        woken: list[str] = []
        if not compensate or status in _IDLE:
            cancelled = self._cancel_tree([run_id], now)
        else:
            tree = self._subtree([run_id])
            for row in self._runs_with(tree, (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUSPENDED)):
                self.tables.set(row, cancel_requested=True, updated_at=now)
            self._wake(tree, now)
            cancelled = self._cancel_tree([row["id"] for row in self._runs_with(tree, _IDLE)], now)
            woken = tree
        if cancelled and status != RunStatus.QUEUED:
            woken += self._hand_over_runs(cancelled, now)
            woken += self._wake_waiters([RUN_TOKEN + rid for rid in cancelled], now)
        return CancelResult(True, tuple(woken), tuple(cancelled))

    @atomically
    def notify_settled(self, run_id: str, now: datetime) -> list[str]:
        """Wake runs waiting on ``run_id`` (or on the run it retries) after it settled outside a turn."""
        row = self.tables.runs.get(run_id)
        retry_of = row["retry_of"] if row is not None else None
        tokens = [RUN_TOKEN + run_id] + ([RUN_TOKEN + retry_of] if retry_of else [])
        # A singleton run that settled outside a turn (dead, timed out) frees its slot here.
        key = row["singleton_key"] if row is not None else None
        admitted = self.hand_over(row["workflow"], key, now) if row is not None and key is not None else []
        return self._wake_waiters(tokens, now) + admitted

    @atomically
    def wake(self, run_ids: list[str], now: datetime) -> None:
        self._wake(run_ids, now)

    @atomically
    def requeue(self, run_id: str, now: datetime, deadline_at: datetime | None) -> list[str]:
        """Put a failed or dead run back to ``pending`` so it really runs again.

        History from the first failed step, local step, child or transaction
        onwards is dropped; failed children it awaited are requeued too; the
        recovery count starts again from zero. Returns the ids requeued.
        """
        status = self._status_of(run_id)
        if status not in _REQUEUEABLE:
            raise InvalidRunState(f"run {run_id!r} is {status}; only failed or dead runs can be requeued")
        return self._requeue(run_id, now, {"deadline_at": deadline_at})

    def _requeue(self, run_id: str, now: datetime, extra: dict[str, Any]) -> list[str]:
        history = self.tables.history(run_id)
        failed = [
            s for s, cp in history.items() if cp["status"] == CheckpointStatus.FAILED and cp["kind"] in RESETTABLE
        ]
        requeued = [run_id]
        if failed:
            dropped = [s for s in sorted(history) if s >= min(failed)]
            children = [
                (history[s]["input"] or {}).get("run_id")
                for s in dropped
                if history[s]["kind"] == CheckpointKind.CHILD and history[s]["status"] == CheckpointStatus.FAILED
            ]
            for seq in dropped:
                self.tables.drop(history, seq)
            for child_id in children:
                if child_id and self._runs_with([child_id], _REQUEUEABLE):
                    requeued += self._requeue(child_id, now, {})
        for row in self._runs_with([run_id], _REQUEUEABLE):
            self.tables.set(
                row,
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
            self._readmit(row, now)
        return requeued

    @atomically
    def pending_steps(self, run_id: str, now: datetime, new_wake: datetime) -> list[tuple[int, str | None]]:
        """Mark every pending dispatched step of an active run for re-dispatch; return them."""
        status = self._status_of(run_id)
        if status not in ACTIVE:
            raise InvalidRunState(f"run {run_id!r} is {status}; its steps are not dispatched any more")
        history = self.tables.history(run_id)
        pending = [
            history[s]
            for s in sorted(history)
            if history[s]["kind"] == CheckpointKind.STEP
            and history[s]["status"] == CheckpointStatus.PENDING
            and history[s]["admission"] is None  # a limited queue's steps are sent by their admission only
        ]
        for cp in pending:
            self.tables.set(cp, wake_at=new_wake, retry_at=None, dispatches=cp["dispatches"] + 1)
        return [(cp["seq"], cp["queue"]) for cp in pending]

    @locked
    def resolve_run(self, run_id: str) -> RunRecord | None:
        """The run whose outcome stands for ``run_id`` (continue-as-new chain's end, or a completed retry)."""
        row = self.tables.runs.get(run_id)
        seen: set[str] = set()
        while row is not None and row["continued_to"] and row["continued_to"] not in seen:
            seen.add(row["id"])
            row = self.tables.runs.get(row["continued_to"])
        if row is not None and row["status"] in _REQUEUEABLE:
            retries = [
                r
                for r in self.tables.runs.values()
                if r["retry_of"] == row["id"] and r["status"] == RunStatus.COMPLETED
            ]
            if retries:
                latest = max(retries, key=lambda r: r["finished_at"])
                return self.resolve_run(latest["id"])
        return run_record(row) if row is not None else None
