"""Named events and lifecycle-event delivery, as the portable store writes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from durable.engine.ports import RunRecord
from durable.engine.vocab import EVENT_TOKEN, TERMINAL, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import LeaseLost
from durable.models import BufferedEvent, Checkpoint, LifecycleBatch, Run, SignalWaiter
from durable.store.portable.shared import StoreBase, matches, run_record


class EventRows(StoreBase):
    def publish_event(self, name: str, payload: Any, event_id: str, now: datetime) -> dict[str, Any]:
        """Deliver an event to every matching waiter, or buffer it once for the first one.

        Runs inside the caller's transaction (subscribers are started in the same
        one). Idempotent on ``event_id``: a second publish delivers nothing.
        """
        self._lock_event(name)
        if BufferedEvent.objects.filter(event_id=event_id).exists():
            return {"duplicate": True, "delivered": [], "buffered": False}
        delivered = []
        waiters = (
            SignalWaiter.objects.filter(name=EVENT_TOKEN + name)
            .order_by("created_at", "id")
            .values("id", "run_id", "seq", "match")
        )
        for w in waiters:
            if not matches(w["match"], payload):
                continue
            taken = Checkpoint.objects.filter(
                run_id=w["run_id"], seq=w["seq"], kind=CheckpointKind.EVENT, status=CheckpointStatus.PENDING
            ).update(status=CheckpointStatus.COMPLETED, output=payload, finished_at=now)
            if taken:
                delivered.append(w["run_id"])
                SignalWaiter.objects.filter(id=w["id"]).delete()
        BufferedEvent.objects.create(
            event_id=event_id, name=name, payload=payload, consumed=bool(delivered), created_at=now
        )
        return {"duplicate": False, "delivered": delivered, "buffered": not delivered}

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

        Older non-matching events are skipped, not a barrier.
        """
        with transaction.atomic():
            self._lock_event(name)
            rows = BufferedEvent.objects.filter(name=name, consumed=False).order_by("id").values("id", "payload")
            pick = next((row for row in rows[:500] if matches(match, row["payload"])), None)
            if pick is None:
                return None
            if not Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(
                locked_until=lease_until
            ):
                raise LeaseLost()
            BufferedEvent.objects.filter(id=pick["id"]).update(consumed=True)
            if create:
                Checkpoint.objects.create(
                    run_id=run_id,
                    seq=seq,
                    name=name,
                    kind=CheckpointKind.EVENT,
                    status=CheckpointStatus.COMPLETED,
                    input={"match": match},
                    output=pick["payload"],
                    started_at=now,
                    finished_at=now,
                )
            else:
                Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CheckpointStatus.PENDING).update(
                    status=CheckpointStatus.COMPLETED, output=pick["payload"], finished_at=now
                )
        return (pick["payload"],)

    def take_lifecycle_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        """Hold a settled run for publishing its lifecycle event; the run as re-read under the lease."""
        taken = (
            Run.objects.filter(id=run_id, status__in=TERMINAL)
            .filter(Q(locked_until__isnull=True) | Q(locked_until__lt=now))
            .update(locked_by=owner, locked_until=lease_until)
        )
        if not taken:
            return None
        row = Run.objects.filter(id=run_id, locked_by=owner).first()
        return run_record(row) if row is not None else None

    def release_lifecycle_lease(self, run_id: str, owner: str) -> None:
        Run.objects.filter(id=run_id, status__in=TERMINAL, locked_by=owner).update(locked_by=None, locked_until=None)

    def finish_lifecycle(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        record: dict[str, Any],
        new_runs: list[dict[str, Any]],
        batched: list[tuple[str, Any, str, dict[str, Any]]],
        make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None],
    ) -> list[str]:
        """Start subscribers, feed accumulators and record it all on the source run, atomically.

        Only while holding the run's lifecycle lease. Returns the runs created.
        """
        with transaction.atomic():
            if not Run.objects.filter(id=run_id, locked_by=owner).update(
                lifecycle=record, lifecycle_owed=bool(record.get("owed"))
            ):
                raise LeaseLost()
            created = self._insert_runs(new_runs) if new_runs else []
            created += self.accumulate(batched, now, make_batch_run)
        return created

    def accumulate(
        self,
        batched: list[tuple[str, Any, str, dict[str, Any]]],
        now: datetime,
        make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None],
    ) -> list[str]:
        """Add events to the debounce/batch accumulator of each subscriber, atomically; the runs started.

        ``batched`` holds ``(subscriber, value, source id, policy)``; a source
        id already in the accumulator is not added twice. A batch that reaches
        its size starts its run in the same transaction.
        """
        created: list[str] = []
        with transaction.atomic():
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
        make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None],
    ) -> list[str]:
        row = LifecycleBatch.objects.select_for_update().filter(subscriber=subscriber, key="").first()
        if row is None:
            window = policy.get("debounce", policy.get("window", 0))
            row = LifecycleBatch.objects.create(
                subscriber=subscriber, opened_at=now, fire_at=now + timedelta(seconds=window)
            )
        if source_id in row.source_ids:
            return []  # this accumulator already holds that run's event
        row.events = [*row.events, value]
        row.source_ids = [*row.source_ids, source_id]
        if "debounce" in policy:
            row.fire_at = now + timedelta(seconds=policy["debounce"])
        if "size" in policy and len(row.events) >= policy["size"]:
            return self._fire(row, make_batch_run)
        row.save(update_fields=["events", "source_ids", "fire_at"])
        return []

    def _fire(
        self, row: LifecycleBatch, make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None]
    ) -> list[str]:
        fields = make_batch_run(row.subscriber, row.id, list(row.events))
        if fields is None:
            return []
        created = self._insert_runs([fields])
        LifecycleBatch.objects.filter(id=row.id).delete()
        return created

    def fire_due_batches(
        self, now: datetime, limit: int, make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None]
    ) -> list[str]:
        """Start the subscriber run of every accumulator whose time has come."""
        created: list[str] = []
        for batch_id in LifecycleBatch.objects.filter(fire_at__lte=now).values_list("id", flat=True)[:limit]:
            with transaction.atomic():
                row = LifecycleBatch.objects.select_for_update(skip_locked=True).filter(id=batch_id).first()
                if row is not None and row.fire_at <= now:
                    created += self._fire(row, make_batch_run)
        return created

    def owed_runs(self, before: datetime, limit: int) -> list[str]:
        return list(
            Run.objects.filter(lifecycle_owed=True, finished_at__lte=before)
            .order_by("finished_at")
            .values_list("id", flat=True)[:limit]
        )

    def settled_since(self, workflows: list[str], since: datetime, limit: int) -> list[RunRecord]:
        rows = Run.objects.filter(
            workflow__in=workflows,
            status__in=(RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD),
            finished_at__gte=since,
            continued_to__isnull=True,
        ).order_by("-finished_at")[:limit]
        return [run_record(row) for row in rows]

    def mark_owed(self, run_id: str, subscribers: list[str]) -> bool:
        """Add subscribers to a settled run's owed set (heal); no-op if another publisher holds it."""
        with transaction.atomic():
            row = Run.objects.select_for_update().filter(id=run_id).values("lifecycle").first()
            if row is None:
                return False
            record = dict(row["lifecycle"] or {})
            record["owed"] = sorted(set(record.get("owed", [])) | set(subscribers))
            return bool(Run.objects.filter(id=run_id).update(lifecycle=record, lifecycle_owed=True))

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
        qs = Run.objects.filter(status__in=statuses, continued_to__isnull=True)
        if run_id is not None:
            qs = qs.filter(id=run_id)
        if workflow is not None:
            qs = qs.filter(workflow=workflow)
        if since is not None:
            qs = qs.filter(finished_at__gte=since)
        if until is not None:
            qs = qs.filter(finished_at__lt=until)
        return list(qs.order_by("finished_at").values_list("id", flat=True)[:limit])
