"""Named events and lifecycle-event delivery, in memory."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.vocab import EVENT_TOKEN, TERMINAL, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import LeaseLost
from durable.store.memory.base import MemoryBase, atomically, locked, matches
from durable.store.memory.tables import IntegrityError, Row, as_json, new_checkpoint, run_record

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MakeBatchRun = Callable[[str, int, list[Any]], dict[str, Any] | None]


class EventsPart(MemoryBase):
    @atomically
    def publish_event(self, name: str, payload: Any, event_id: str, now: datetime) -> dict[str, Any]:
        """Deliver an event to every matching waiter, or buffer it once for the first one.

        Idempotent on ``event_id``: a second publish delivers nothing. The
        delivered runs are not woken here (the caller wakes them).
        """
        if any(e["event_id"] == event_id for e in self.tables.events.values()):
            return {"duplicate": True, "delivered": [], "buffered": False}
        delivered = []
        waiters = sorted(
            (w for w in self.tables.waiters.values() if w["name"] == EVENT_TOKEN + name),
            key=lambda w: (w["created_at"], w["id"]),
        )
        for w in waiters:
            if not matches(w["match"], payload):
                continue
            cp = self.tables.checkpoints.get(w["run_id"], {}).get(w["seq"])
            if cp is not None and cp["kind"] == CheckpointKind.EVENT and cp["status"] == CheckpointStatus.PENDING:
                self.tables.set(cp, status=CheckpointStatus.COMPLETED, output=as_json(payload), finished_at=now)
                delivered.append(w["run_id"])
                self.tables.drop(self.tables.waiters, w["id"])
        row_id = self.tables.next_id()
        row = {"id": row_id, "event_id": event_id, "name": name, "payload": as_json(payload), "created_at": now}
        self.tables.put(self.tables.events, row_id, {**row, "consumed": bool(delivered)})
        return {"duplicate": False, "delivered": delivered, "buffered": not delivered}

    @atomically
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
    ) -> tuple[Any] | None:
        """Consume the oldest unconsumed buffered event matching ``match`` into checkpoint ``seq``.

        Older non-matching events are skipped, not a barrier. Raises
        LeaseLost (consuming nothing) when ``owner`` no longer holds the run.
        """
        buffered = [e for e in self.tables.ordered(self.tables.events) if e["name"] == name and not e["consumed"]]
        pick = next((e for e in buffered[:500] if matches(match, e["payload"])), None)
        if pick is None:
            return None
        run = self._held(run_id, owner)
        if run is None:
            raise LeaseLost()
        self.tables.set(run, locked_until=lease_until)
        self.tables.set(pick, consumed=True)
        history = self.tables.history(run_id)
        if create:
            if seq in history:
                raise IntegrityError(f"run {run_id!r} already has a checkpoint at position {seq}")
            self.tables.put(history, seq, self._event_checkpoint(run_id, seq, name, match, pick["payload"], now))
        elif seq in history and history[seq]["status"] == CheckpointStatus.PENDING:
            self.tables.set(history[seq], status=CheckpointStatus.COMPLETED, output=pick["payload"], finished_at=now)
        return (as_json(pick["payload"]),)

    def _event_checkpoint(
        self, run_id: str, seq: int, name: str, match: dict[str, Any] | None, payload: Any, now: datetime
    ) -> Row:
        rec = CheckpointRecord(
            seq=seq,
            name=name,
            kind=CheckpointKind.EVENT,
            status=CheckpointStatus.COMPLETED,
            input={"match": match},
            output=payload,
            started_at=now,
            finished_at=now,
        )
        return new_checkpoint(run_id, rec, self.tables.next_id())

    @atomically
    def take_lifecycle_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        """Hold a settled run for publishing its lifecycle event; the run as re-read under the lease."""
        row = self.tables.runs.get(run_id)
        if row is None or row["status"] not in TERMINAL:
            return None
        if row["locked_until"] is not None and row["locked_until"] >= now:
            return None
        self.tables.set(row, locked_by=owner, locked_until=lease_until)
        return run_record(row)

    @atomically
    def release_lifecycle_lease(self, run_id: str, owner: str) -> None:
        row = self.tables.runs.get(run_id)
        if row is not None and row["status"] in TERMINAL and row["locked_by"] == owner:
            self.tables.set(row, locked_by=None, locked_until=None)

    @atomically
    def finish_lifecycle(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        record: dict[str, Any],
        new_runs: list[dict[str, Any]],
        batched: list[tuple[str, Any, str, dict[str, Any]]],
        make_batch_run: MakeBatchRun,
    ) -> list[str]:
        """Start subscribers, feed accumulators and record it all on the source run, atomically.

        Only while holding the run's lifecycle lease (else LeaseLost, nothing written). Returns the runs created.
        """
        row = self.tables.runs.get(run_id)
        if row is None or row["locked_by"] != owner:
            raise LeaseLost()
        self.tables.set(row, lifecycle=as_json(record), lifecycle_owed=bool(record.get("owed")))
        created = self._insert_runs(new_runs) if new_runs else []
        return created + self.accumulate(batched, now, make_batch_run)

    @atomically
    def accumulate(
        self, batched: list[tuple[str, Any, str, dict[str, Any]]], now: datetime, make_batch_run: MakeBatchRun
    ) -> list[str]:
        """Add events to each subscriber's debounce/batch accumulator, atomically; the runs started."""
        created: list[str] = []
        for subscriber, value, source_id, policy in batched:
            created += self._accumulate(subscriber, value, source_id, policy, now, make_batch_run)
        return created

    def _accumulate(
        self,
        subscriber: str,
        value: Any,
        source_id: str,
        policy: dict[str, Any],
        now: datetime,
        make_batch_run: MakeBatchRun,
    ) -> list[str]:
        row = next((b for b in self.tables.batches.values() if b["subscriber"] == subscriber and b["key"] == ""), None)
        if row is None:
            window = policy.get("debounce", policy.get("window", 0))
            batch_id = self.tables.next_id()
            row = {"id": batch_id, "subscriber": subscriber, "key": "", "events": [], "source_ids": []}
            row.update(opened_at=now, fire_at=now + timedelta(seconds=window))
            self.tables.put(self.tables.batches, batch_id, row)
        if source_id in row["source_ids"]:
            return []  # this accumulator already holds that run's event
        events = [*row["events"], as_json(value)]
        fire_at = now + timedelta(seconds=policy["debounce"]) if "debounce" in policy else row["fire_at"]
        if "size" in policy and len(events) >= policy["size"]:
            # (As the database store: the grown batch is only kept if its run starts.)
            return self._fire({**row, "events": events}, make_batch_run)
        self.tables.set(row, events=events, source_ids=[*row["source_ids"], source_id], fire_at=fire_at)
        return []

    def _fire(self, row: Row, make_batch_run: MakeBatchRun) -> list[str]:
        fields = make_batch_run(row["subscriber"], row["id"], as_json(row["events"]))
        if fields is None:
            return []
        created = self._insert_runs([fields])
        self.tables.drop(self.tables.batches, row["id"])
        return created

    @locked
    def fire_due_batches(self, now: datetime, limit: int, make_batch_run: MakeBatchRun) -> list[str]:
        """Start the subscriber run of every accumulator whose time has come, each in its own atomic block.

        A batch whose run fails to build leaves the batches fired before it started.
        """
        due = [row for row in self.tables.ordered(self.tables.batches) if row["fire_at"] <= now][:limit]
        created: list[str] = []
        for row in due:
            with self.atomic():
                created += self._fire(row, make_batch_run)
        return created

    @locked
    def owed_runs(self, before: datetime, limit: int) -> list[str]:
        rows = [r for r in self.tables.runs.values() if r["lifecycle_owed"] and _at_or_before(r["finished_at"], before)]
        return [r["id"] for r in sorted(rows, key=lambda r: r["finished_at"])][:limit]

    @locked
    def settled_since(self, workflows: list[str], since: datetime, limit: int) -> list[RunRecord]:
        wanted = set(workflows)
        rows = [
            r
            for r in self.tables.runs.values()
            if r["workflow"] in wanted
            and r["status"] in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD)
            and r["finished_at"] is not None
            and r["finished_at"] >= since
            and r["continued_to"] is None
        ]
        rows.sort(key=lambda r: r["finished_at"], reverse=True)
        return [run_record(r) for r in rows[:limit]]

    @atomically
    def mark_owed(self, run_id: str, subscribers: list[str]) -> bool:
        """Add subscribers to a settled run's owed set (heal)."""
        row = self.tables.runs.get(run_id)
        if row is None:
            return False
        record = dict(row["lifecycle"] or {})
        record["owed"] = sorted(set(record.get("owed", [])) | set(subscribers))
        self.tables.set(row, lifecycle=as_json(record), lifecycle_owed=True)
        return True

    @locked
    def republish_targets(
        self,
        *,
        run_id: str | None,
        workflow: str | None,
        statuses: list[str],
        since: datetime | None,
        until: datetime | None,
        limit: int,
    ) -> list[str]:
        rows = [
            r
            for r in self.tables.runs.values()
            if r["status"] in statuses
            and r["continued_to"] is None
            and (run_id is None or r["id"] == run_id)
            and (workflow is None or r["workflow"] == workflow)
            and (since is None or (r["finished_at"] is not None and r["finished_at"] >= since))
            and (until is None or (r["finished_at"] is not None and r["finished_at"] < until))
        ]
        rows.sort(key=lambda r: (r["finished_at"] is None, r["finished_at"] or _EPOCH))
        return [r["id"] for r in rows[:limit]]


def _at_or_before(when: datetime | None, before: datetime) -> bool:
    return when is not None and when <= before
