"""Limited step queues in memory: admission (the same plan as the database stores), queue rows, figures."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from durable.engine.plan_queues import (
    Candidate,
    QueueAdmissionPlan,
    QueueAdmitted,
    QueueSeen,
    effective_limits,
    rank_within_keys,
    unkeyed_served,
)
from durable.engine.ports import QueueRecord, QueueStats
from durable.engine.queue_tally import QueueTally
from durable.engine.vocab import ACTIVE, UNSETTLED, Admission, CheckpointKind, CheckpointStatus
from durable.store.memory.base import MemoryBase, atomically, locked
from durable.store.memory.tables import Row, as_json


def _record(row: Row) -> QueueRecord:
    return QueueRecord(row["name"], as_json(row["overrides"]), row["paused"], row["updated_at"])


class QueuesPart(MemoryBase):
    def _queue_steps(self, queue: str) -> Iterator[Row]:
        for history in self.tables.checkpoints.values():
            for cp in history.values():
                if cp["kind"] == CheckpointKind.STEP and cp["queue"] == queue and cp["admission"] is not None:
                    yield cp

    def _run_active(self, run_id: str) -> bool:
        run = self.tables.runs.get(run_id)
        return run is not None and run["status"] in ACTIVE

    def _holds(self, cp: Row, now: datetime) -> bool:
        """Does ``cp`` hold a slot: admitted, unsettled, lease not lapsed, run active?"""
        return (
            cp["admission"] == Admission.ADMITTED
            and cp["status"] in UNSETTLED
            and cp["wake_at"] is not None
            and cp["wake_at"] > now
            and self._run_active(cp["run_id"])
        )

    def _queue_row(self, name: str, now: datetime) -> Row:
        row = self.tables.queues.get(name)
        if row is None:
            row = {"name": name, "overrides": {}, "paused": False, "rate_next_at": None, "updated_at": now}
            row.update(admitted_minute=None, admitted_count=0, admitted_prior=0, unkeyed_served_at=None)
            self.tables.put(self.tables.queues, name, row)
        return row

    @atomically
    def admit_steps(self, plan: QueueAdmissionPlan, seen: QueueSeen | None = None) -> QueueAdmitted:
        """Execute a :class:`~durable.engine.plan_queues.QueueAdmissionPlan` (the store lock serialises admitters)."""
        queue = self._queue_row(plan.queue, plan.now)
        if queue["paused"]:
            return QueueAdmitted(plan.queue, paused=True)
        limits = effective_limits(plan.defaults, queue["overrides"])
        steps = list(self._queue_steps(plan.queue))
        held: dict[str | None, int] = {}
        for cp in steps:
            if self._holds(cp, plan.now):
                held[cp["queue_key"]] = held.get(cp["queue_key"], 0) + 1
        if not plan.wanted(limits, sum(held.values())):
            return QueueAdmitted(plan.queue)
        waiting = [cp for cp in steps if self._may_admit(cp, plan.now)]
        # Keyed steps' last admission from the steps, unkeyed ones' from the row (as the database stores).
        served: dict[str | None, datetime] = {None: queue["unkeyed_served_at"]} if queue["unkeyed_served_at"] else {}
        for cp in steps:
            if (
                cp["admitted_at"] is not None
                and cp["queue_key"] is not None
                and (cp["queue_key"] not in served or cp["admitted_at"] > served[cp["queue_key"]])
            ):
                served[cp["queue_key"]] = cp["admitted_at"]
        candidates = [
            Candidate(
                cp["id"],
                cp["run_id"],
                cp["seq"],
                cp["queue_key"],
                cp["priority"],
                cp["enqueued_at"],
                served=served.get(cp["queue_key"]),
            )
            for cp in waiting
        ]
        grants, rate_next_at = plan.choose(
            limits, sum(held.values()), held, rank_within_keys(candidates), queue["rate_next_at"]
        )
        by_id = {cp["id"]: cp for cp in waiting}
        for grant in grants:
            self.tables.set(by_id[grant.id], admission=Admission.ADMITTED, admitted_at=grant.start, wake_at=grant.until)
        tally = QueueTally.of(queue).add(plan.now, len(grants))
        if grants or rate_next_at != queue["rate_next_at"]:
            self.tables.set(
                queue,
                rate_next_at=rate_next_at,
                admitted_minute=tally.minute,
                admitted_count=tally.count,
                admitted_prior=tally.prior,
                unkeyed_served_at=unkeyed_served(queue["unkeyed_served_at"], grants),
            )
        return QueueAdmitted(plan.queue, grants)

    def _may_admit(self, cp: Row, now: datetime) -> bool:
        if cp["status"] != CheckpointStatus.PENDING or not self._run_active(cp["run_id"]):
            return False
        if cp["retry_at"] is not None and cp["retry_at"] > now:
            return False
        lapsed = cp["admission"] == Admission.ADMITTED and (cp["wake_at"] is None or cp["wake_at"] <= now)
        return cp["admission"] == Admission.WAITING or lapsed

    @locked
    def queue_rows(self) -> dict[str, QueueRecord]:
        return {name: _record(row) for name, row in self.tables.queues.items()}

    @atomically
    def configure_queue(
        self, name: str, now: datetime, *, overrides: dict[str, Any] | None = None, paused: bool | None = None
    ) -> QueueRecord:
        row = self._queue_row(name, now)
        changes: dict[str, Any] = {"updated_at": now}
        if overrides is not None:
            changes["overrides"] = as_json(overrides)
        if paused is not None:
            changes["paused"] = paused
        self.tables.set(row, **changes)
        return _record(row)

    @locked
    def queue_stats(self, name: str, now: datetime, key: str | None = None) -> QueueStats:
        steps = [cp for cp in self._queue_steps(name) if cp["status"] in UNSETTLED and self._run_active(cp["run_id"])]
        running = sum(1 for cp in steps if self._holds(cp, now))
        key_running = sum(1 for cp in steps if key is not None and cp["queue_key"] == key and self._holds(cp, now))
        waiting = [cp for cp in steps if cp["status"] == CheckpointStatus.PENDING and not self._holds(cp, now)]
        arrivals = [cp["enqueued_at"] for cp in waiting if cp["enqueued_at"] is not None]
        row = self.tables.queues.get(name)
        recent = QueueTally.of(row).per_minute(now) if row is not None else 0
        return QueueStats(running, len(waiting), min(arrivals) if arrivals else None, recent, key_running)
