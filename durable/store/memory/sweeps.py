"""The sweeps' queries and compare-and-set writes, and the worker fleet, in memory."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from datetime import datetime, timedelta
from typing import Any

from durable.engine.plan_queues import claimable
from durable.engine.plan_steps import plan_lease_expiry
from durable.engine.ports import LeasesExpired, RunRecord
from durable.engine.vocab import ACTIVE, UNSETTLED, CheckpointKind, CheckpointStatus, RunStatus
from durable.store.memory.base import MemoryBase, atomically, dead_letter, locked
from durable.store.memory.tables import Row, as_json, run_record

_EXPIRED_STEP = ("run_id", "seq", "name", "queue", "attempts", "locked_by", "wake_at", "timeout_at")
_LOST_STEP = ("run_id", "seq", "name", "queue", "dispatches", "wake_at", "retry_at")


class SweepsPart(MemoryBase):
    # Provided by RunsPart: the store is one class made of these parts.
    _take: Callable[[Row, str, datetime, datetime], None]

    def _runs_of(self, namespaces: Collection[str] | None) -> list[Row]:
        """The runs a worker scoped to ``namespaces`` takes (None: every run)."""
        runs = self.tables.runs.values()
        return list(runs) if namespaces is None else [r for r in runs if r["namespace"] in namespaces]

    def _pending(self, namespaces: Collection[str] | None = None) -> list[Row]:
        rows = [r for r in self._runs_of(namespaces) if r["status"] == RunStatus.PENDING]
        return sorted(rows, key=lambda r: (-r["priority"], r["created_at"]))

    def _sleepers_due(self, now: datetime, namespaces: Collection[str] | None = None) -> list[Row]:
        rows = [
            r
            for r in self._runs_of(namespaces)
            if r["status"] == RunStatus.SUSPENDED and r["wake_at"] is not None and r["wake_at"] <= now
        ]
        return sorted(rows, key=lambda r: r["wake_at"])

    def _steps(self, *statuses: str) -> Iterator[Row]:
        """Dispatched-step checkpoints with one of ``statuses`` (of any run)."""
        for history in self.tables.checkpoints.values():
            for cp in history.values():
                if cp["kind"] == CheckpointKind.STEP and cp["status"] in statuses:
                    yield cp

    def _active(self, run_id: str) -> bool:
        run = self.tables.runs.get(run_id)
        return run is not None and run["status"] in ACTIVE

    @locked
    def due_runs(self, now: datetime, limit: int, *, namespaces: Collection[str] | None = None) -> list[str]:
        """Pending runs (highest priority, oldest first), then suspended runs whose wake is due (earliest)."""
        pending = [r["id"] for r in self._pending(namespaces)[:limit]]
        return pending + [r["id"] for r in self._sleepers_due(now, namespaces)[: max(limit - len(pending), 0)]]

    @atomically
    def claim_due_runs(
        self, owner: str, now: datetime, lease_until: datetime, limit: int, *, namespaces: Collection[str] | None = None
    ) -> list[RunRecord]:
        """Take the leases of up to ``limit`` due runs at once (in :meth:`due_runs` order), of ``namespaces``."""
        page = self._pending(namespaces)[:limit]
        page += self._sleepers_due(now, namespaces)[: max(limit - len(page), 0)]
        for row in page:
            self._take(row, owner, now, lease_until)
        return [run_record(row) for row in page]

    @locked
    def due_steps(
        self, now: datetime, limit: int, *, namespaces: Collection[str] | None = None
    ) -> list[tuple[str, int, str | None]]:
        """Pending dispatched steps of active runs (of ``namespaces``) that may be claimed now."""
        served = {r["id"] for r in self._runs_of(namespaces)}
        rows = [
            cp
            for cp in self._steps(CheckpointStatus.PENDING)
            if cp["run_id"] in served
            and self._active(cp["run_id"])
            and (cp["retry_at"] is None or cp["retry_at"] <= now)
            and claimable(cp["admission"], cp["admitted_at"], cp["wake_at"], now)
        ]
        rows.sort(key=lambda cp: (cp["enqueued_at"] is None, cp["enqueued_at"] or now, cp["id"]))
        return [(cp["run_id"], cp["seq"], cp["queue"]) for cp in rows[:limit]]

    @locked
    def orphans(self, now: datetime, limit: int, *, namespaces: Collection[str] | None = None) -> list[str]:
        rows = [
            r
            for r in self._runs_of(namespaces)
            if r["status"] == RunStatus.RUNNING and r["locked_until"] is not None and r["locked_until"] < now
        ]
        return [r["id"] for r in rows[:limit]]

    @atomically
    def recover_orphan(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        dead_lifecycle: Callable[[str], dict[str, Any] | None] = lambda workflow: None,
    ) -> RunRecord | str | None:
        """Take an expired lease and decide on the run as re-read under it.

        Returns the run (lease held, recovery counted) to run a turn on,
        ``"dead"`` when it exceeded ``max_attempts``, or None when it was not an
        orphan after all (lease renewed, run moved on, or a concurrent cancel).
        """
        row = self.tables.runs.get(run_id)
        if row is None or row["status"] != RunStatus.RUNNING:
            return None
        if row["locked_until"] is None or row["locked_until"] >= now:
            return None
        attempts = row["recovery_attempts"] + 1
        if attempts > max_attempts:
            lifecycle = dead_lifecycle(row["workflow"])
            self._release(
                row,
                now,
                RunStatus.DEAD,
                error=dead_letter(f"run was orphaned {attempts} times (limit {max_attempts}); giving up"),
                lifecycle=as_json(lifecycle or {}),
                lifecycle_owed=bool(lifecycle),
                recovery_attempts=attempts,
                finished_at=now,
            )
            return RunStatus.DEAD
        self.tables.set(
            row,
            locked_by=owner,
            locked_until=lease_until,
            recovery_attempts=attempts,
            turns=row["turns"] + 1,
            updated_at=now,
        )
        return run_record(row)

    @locked
    def overdue_runs(self, now: datetime, limit: int) -> list[str]:
        rows = [r for r in self.tables.runs.values() if self._overdue(r, now) and not r["cancel_requested"]]
        return [r["id"] for r in rows[:limit]]

    @staticmethod
    def _overdue(row: Row, now: datetime) -> bool:
        return row["status"] in ACTIVE and row["deadline_at"] is not None and row["deadline_at"] < now

    @atomically
    def request_timeout(self, run_id: str, now: datetime, error: dict[str, Any]) -> bool:
        """Ask an overdue run to stop: its next turn undoes what it can and ends failed with ``error``."""
        row = self.tables.runs.get(run_id)
        if row is None or not self._overdue(row, now) or row["status"] == RunStatus.BLOCKED:
            return False
        if row["cancel_requested"]:
            return False
        self.tables.set(row, cancel_requested=True, error=as_json(error), updated_at=now)
        self._wake([run_id], now)
        return True

    @atomically
    def fail_overdue(
        self, run_id: str, now: datetime, error: dict[str, Any], lifecycle: dict[str, Any] | None = None
    ) -> bool:
        row = self.tables.runs.get(run_id)
        if row is None or not self._overdue(row, now):
            return False
        self._release(
            row,
            now,
            RunStatus.FAILED,
            error=as_json(error),
            lifecycle=as_json(lifecycle or {}),
            lifecycle_owed=bool(lifecycle),
            finished_at=now,
            wake_at=None,
        )
        self._delete_waiters([run_id])
        return True

    @locked
    def expired_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]:
        """Running steps whose execution lease lapsed (worker gone) or whose timeout passed."""
        rows = [
            cp
            for cp in self._steps(CheckpointStatus.RUNNING)
            if (cp["wake_at"] is not None and cp["wake_at"] < now)
            or (cp["timeout_at"] is not None and cp["timeout_at"] < now)
        ]
        return [{name: cp[name] for name in _EXPIRED_STEP} for cp in rows[:limit]]

    @locked
    def lost_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]:
        """Pending dispatched steps that no worker took before their redelivery time."""
        rows = [
            cp
            for cp in self._steps(CheckpointStatus.PENDING)
            if cp["wake_at"] is not None
            and cp["wake_at"] <= now
            and self._active(cp["run_id"])
            and cp["admission"] is None  # a limited queue's steps are sent by their admission
        ]
        rows.sort(key=lambda cp: (cp["wake_at"], cp["id"]))
        return [{name: cp[name] for name in _LOST_STEP} for cp in rows[:limit]]

    @atomically
    def redispatch_step(self, run_id: str, seq: int, expected_wake: datetime | None, new_wake: datetime) -> bool:
        """Claim the right to re-dispatch a pending step (compare-and-set on its wake time)."""
        cp = self.tables.checkpoints.get(run_id, {}).get(seq)
        if cp is None or cp["status"] != CheckpointStatus.PENDING or cp["wake_at"] != expected_wake:
            return False
        self.tables.set(cp, wake_at=new_wake, dispatches=cp["dispatches"] + 1)
        return True

    @locked
    def blocked_runs(self, limit: int) -> list[dict[str, Any]]:
        rows = [r for r in self.tables.runs.values() if r["status"] == RunStatus.BLOCKED][:limit]
        return [
            {"id": r["id"], "workflow": r["workflow"], "version": r["version"], "error": as_json(r["error"])}
            for r in rows
        ]

    @locked
    def next_wake(self) -> datetime | None:
        """The earliest wake time of a suspended run (the worker loop sleeps no longer than that)."""
        wakes = [r["wake_at"] for r in self.tables.runs.values() if r["status"] == RunStatus.SUSPENDED]
        return min((w for w in wakes if w is not None), default=None)

    @locked
    def next_due(self) -> datetime | None:
        """The earliest moment at which some work falls due (for test drivers)."""
        steps = [cp["wake_at"] for cp in self._steps(*UNSETTLED) if cp["wake_at"] is not None]
        candidates = [*steps, *([w] if (w := self.next_wake()) is not None else [])]
        return min(candidates, default=None)

    # -- the worker fleet -------------------------------------------------------------
    @atomically
    def advertise(self, descriptor: dict[str, Any], now: datetime, expires_at: datetime) -> None:
        row = self.tables.workers.get(descriptor["id"])
        base = row or {"queues": [], "steps": [], "workflows": [], "capabilities": {}, "protocol": 1}
        fresh = {"started_at": self._clock.now(), **base, **as_json_values(descriptor)}
        self.tables.put(self.tables.workers, descriptor["id"], {**fresh, "heartbeat_at": now, "expires_at": expires_at})

    @atomically
    def refresh_worker(self, worker_id: str, now: datetime, expires_at: datetime) -> bool:
        row = self.tables.workers.get(worker_id)
        if row is not None:
            self.tables.set(row, heartbeat_at=now, expires_at=expires_at)
        return row is not None

    @atomically
    def retire_worker(self, worker_id: str) -> None:
        self.tables.drop(self.tables.workers, worker_id)

    @locked
    def live_workers(self, now: datetime) -> list[dict[str, Any]]:
        rows = [dict(row) for row in self.tables.workers.values() if row["expires_at"] > now]
        return [as_json_values(row) for row in sorted(rows, key=lambda r: (r["hostname"], r["pid"]))]

    @atomically
    def prune_workers(self, now: datetime) -> int:
        gone = [wid for wid, row in self.tables.workers.items() if row["expires_at"] < now - timedelta(hours=1)]
        for worker_id in gone:
            self.tables.drop(self.tables.workers, worker_id)
        return len(gone)

    @locked
    def lease_holders(self, prefix: str, limit: int) -> list[str]:
        """Owners whose ids start with ``prefix`` and that hold a run's or a running step's lease."""
        found = {r["locked_by"] for r in self.tables.runs.values() if r["status"] == RunStatus.RUNNING}
        found.update(cp["locked_by"] for cp in self._steps(CheckpointStatus.RUNNING))
        return sorted(o for o in found if o is not None and o.startswith(prefix))[:limit]

    @atomically
    def expire_leases(self, owner: str, now: datetime) -> LeasesExpired:
        plan = plan_lease_expiry(owner, now)
        runs = steps = 0
        for r in self.tables.runs.values():
            if r["status"] == plan.run_status and r["locked_by"] == owner and _later(r["locked_until"], plan.until):
                self.tables.set(r, locked_until=plan.until)
                runs += 1
        for cp in self._steps(plan.step_status):
            if cp["kind"] == plan.step_kind and cp["locked_by"] == owner and _later(cp["wake_at"], plan.until):
                self.tables.set(cp, wake_at=plan.until)
                steps += 1
        return LeasesExpired(runs=runs, steps=steps)


def as_json_values(row: dict[str, Any]) -> dict[str, Any]:
    """A worker descriptor with private copies of its JSON columns."""
    return {k: as_json(v) if k in ("queues", "steps", "workflows", "capabilities") else v for k, v in row.items()}


def _later(value: datetime | None, now: datetime) -> bool:
    return value is not None and value > now
