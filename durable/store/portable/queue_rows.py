"""Limited step queues: admission under the queue row's lock, the queue rows, what a queue holds now."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, Count, DateTimeField, Exists, F, Max, Min, Q, Value, When, Window
from django.db.models.functions import RowNumber

from durable.engine.plan_queues import (
    Candidate,
    Grant,
    QueueAdmissionPlan,
    QueueAdmitted,
    QueueSeen,
    effective_limits,
    unkeyed_served,
)
from durable.engine.ports import QueueRecord, QueueStats
from durable.engine.queue_tally import COLUMNS, QueueTally
from durable.engine.vocab import ACTIVE, UNSETTLED, Admission, CheckpointKind, CheckpointStatus
from durable.models import Checkpoint, Queue
from durable.store.portable.shared import StoreBase


def _record(row: Queue) -> QueueRecord:
    return QueueRecord(row.name, dict(row.overrides or {}), row.paused, row.updated_at)


class QueueRows(StoreBase):
    def admit_steps(self, plan: QueueAdmissionPlan, seen: QueueSeen | None = None) -> QueueAdmitted:
        """Execute a :class:`~durable.engine.plan_queues.QueueAdmissionPlan` in one transaction.

        The queue row is locked first (created if missing), so admitters of
        one queue take turns; the same statement says whether any step waits,
        so a queue with nothing to admit costs that one statement. Then the
        slots held are counted, the candidates read, and the grants written in
        one statement, compare-and-set on ``pending``.
        """
        with transaction.atomic():
            queue = self._lock_queue(plan)
            if queue is None or queue["paused"]:
                return QueueAdmitted(plan.queue, paused=queue is not None)
            limits = effective_limits(plan.defaults, queue["overrides"] or {})
            # Counted by a statement of its own, after the lock: on PostgreSQL a statement that
            # waited for the lock still reads with the snapshot it took before (its subqueries
            # would miss the slots the previous holder of the lock just granted).
            held = self._holders(plan).count()
            wanted = plan.wanted(limits, held)
            if not wanted:
                return QueueAdmitted(plan.queue)
            candidates = self._candidates(plan, wanted)
            if not candidates:
                return QueueAdmitted(plan.queue)
            keys = {c.key for c in candidates}
            by_key = self._held_by_key(plan, keys) if limits.key_concurrency is not None else {}
            grants, rate_next_at = plan.choose(limits, held, by_key, candidates, queue["rate_next_at"])
            granted = self._grant(plan, grants)
            tally = QueueTally.of(queue).add(plan.now, len(granted))
            if granted or rate_next_at != queue["rate_next_at"]:
                Queue.objects.filter(name=plan.queue).update(
                    rate_next_at=rate_next_at,
                    admitted_minute=tally.minute,
                    admitted_count=tally.count,
                    admitted_prior=tally.prior,
                    unkeyed_served_at=unkeyed_served(queue["unkeyed_served_at"], granted),
                )
        return QueueAdmitted(plan.queue, granted)

    def _lock_queue(self, plan: QueueAdmissionPlan) -> dict[str, Any] | None:
        """The queue row, locked, and whether a step waits (None: nothing waits, the queue is not paused).

        ``waits`` is read with the statement's snapshot, which may be older than
        the lock: it can only be wrong about a step written waiting by a commit
        that has not asked for admission yet (every such writer asks after its
        commit, and then finds it), or about one just admitted (then the fresh
        counts that follow find nothing to do).
        """
        row = (
            Queue.objects.select_for_update(of=("self",))
            .filter(name=plan.queue)
            .annotate(waits=Exists(self._waiting(plan)))
            .values("paused", "overrides", "rate_next_at", "waits", "unkeyed_served_at", *COLUMNS)
            .first()
        )
        if row is None:
            Queue.objects.bulk_create([Queue(name=plan.queue, updated_at=plan.now)], ignore_conflicts=True)
            return self._lock_queue(plan)
        if not row["waits"] and not row["paused"]:
            return None
        return dict(row)

    def _holders(self, plan: QueueAdmissionPlan) -> Any:
        """Slot holders: admitted, unsettled, lease not lapsed, run active."""
        return (
            self._slots(plan)
            .filter(admission=plan.admitted, status__in=plan.open, wake_at__gt=plan.now)
            .filter(run__status__in=plan.run_statuses)
        )

    @staticmethod
    def _slots(plan: QueueAdmissionPlan) -> Any:
        return Checkpoint.objects.filter(queue=plan.queue, kind=plan.kind, admission__isnull=False)

    def _held_by_key(self, plan: QueueAdmissionPlan, keys: set[str | None]) -> dict[str | None, int]:
        """Slots held now by each of ``keys`` (a step without a key has no per-key limit)."""
        named = [k for k in keys if k is not None]
        if not named:
            return {}
        rows = self._holders(plan).filter(queue_key__in=named).values("queue_key").annotate(n=Count("id")).order_by()
        return {row["queue_key"]: row["n"] for row in rows}

    def _waiting(self, plan: QueueAdmissionPlan) -> Any:
        """Steps that may be admitted now: waiting (or with a lapsed admission), retry due, run active."""
        return (
            self._slots(plan)
            .filter(status=CheckpointStatus.PENDING, run__status__in=plan.run_statuses)
            .filter(Q(admission=plan.waiting) | Q(admission=plan.admitted, wake_at__lte=plan.now))
            .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=plan.now))
        )

    def _candidates(self, plan: QueueAdmissionPlan, wanted: int) -> list[Candidate]:
        """Each key's first ``wanted`` waiting steps (by arrival, per priority), with when the key was last served."""
        rank = Window(
            RowNumber(),
            partition_by=[F("priority"), F("queue_key")],
            order_by=[F("enqueued_at").asc(), F("id").asc()],
        )
        rows = list(
            self._waiting(plan)
            .annotate(rank=rank)
            .filter(rank__lte=wanted)
            .values_list("id", "run_id", "seq", "queue_key", "priority", "enqueued_at", "rank")
        )
        served = self._served(plan, {row[3] for row in rows})
        return [
            Candidate(cp_id, run_id, seq, key, priority, enqueued_at, rank, served.get(key))
            for cp_id, run_id, seq, key, priority, enqueued_at, rank in rows
        ]

    def _served(self, plan: QueueAdmissionPlan, keys: set[str | None]) -> dict[str | None, datetime]:
        """When each of ``keys`` was last admitted in this queue (round robin: the longest ago goes first)."""
        if len(keys) < 2:
            return {}  # one key: nothing to take turns with
        named = [k for k in keys if k is not None]
        rows = (
            Checkpoint.objects.filter(queue=plan.queue, admitted_at__isnull=False, queue_key__in=named)
            .values("queue_key")
            .annotate(last=Max("admitted_at"))
            .order_by()
        )
        served: dict[str | None, datetime] = {row["queue_key"]: row["last"] for row in rows}
        if None in keys:  # steps without a key: the queue row keeps when they were last admitted
            last = Queue.objects.filter(name=plan.queue).values_list("unkeyed_served_at", flat=True).first()
            if last is not None:
                served[None] = last
        return served

    def _grant(self, plan: QueueAdmissionPlan, grants: tuple[Grant, ...]) -> tuple[Grant, ...]:
        """Write the grants in one statement (compare-and-set on ``pending``); those written."""
        if not grants:
            return ()
        starts = {grant.start for grant in grants}
        if len(starts) == 1:
            admitted_at: Any = grants[0].start
            wake_at: Any = grants[0].until
        else:
            admitted_at = Case(*(When(id=g.id, then=Value(g.start)) for g in grants), output_field=DateTimeField())
            wake_at = Case(*(When(id=g.id, then=Value(g.until)) for g in grants), output_field=DateTimeField())
        rows = Checkpoint.objects.filter(id__in=[g.id for g in grants], status=CheckpointStatus.PENDING)
        written = rows.update(admission=plan.admitted, admitted_at=admitted_at, wake_at=wake_at)
        if written == len(grants):
            return grants
        # Under the queue's lock nothing else grants; a step that left pending meanwhile is not dispatched.
        mine = set(rows.filter(admission=plan.admitted).values_list("id", flat=True))
        return tuple(grant for grant in grants if grant.id in mine)

    # -- the queue rows (runtime overrides, pause) ------------------------------------
    def queue_rows(self) -> dict[str, QueueRecord]:
        return {row.name: _record(row) for row in Queue.objects.all()}

    def configure_queue(
        self, name: str, now: datetime, *, overrides: dict[str, Any] | None = None, paused: bool | None = None
    ) -> QueueRecord:
        """Replace the queue's stored overrides and/or set its paused flag (row created if missing)."""
        with transaction.atomic():
            row = Queue.objects.select_for_update().filter(name=name).first()
            if row is None:
                Queue.objects.bulk_create([Queue(name=name, updated_at=now)], ignore_conflicts=True)
                row = Queue.objects.select_for_update().get(name=name)
            if overrides is not None:
                row.overrides = dict(overrides)
            if paused is not None:
                row.paused = paused
            row.updated_at = now
            row.save(update_fields=["overrides", "paused", "updated_at"])
        return _record(row)

    def queue_stats(self, name: str, now: datetime, key: str | None = None) -> QueueStats:
        """What the queue holds now (the admin's figures); with ``key``, also the slots that key holds."""
        steps = Checkpoint.objects.filter(queue=name, kind=CheckpointKind.STEP, admission__isnull=False)
        open_steps = steps.filter(status__in=UNSETTLED, run__status__in=ACTIVE)
        holders = open_steps.filter(admission=Admission.ADMITTED, wake_at__gt=now)
        running = holders.count()
        key_running = holders.filter(queue_key=key).count() if key is not None else 0
        waiting = open_steps.filter(status=CheckpointStatus.PENDING).exclude(
            admission=Admission.ADMITTED, wake_at__gt=now
        )
        found = waiting.aggregate(n=Count("id"), oldest=Min("enqueued_at"))
        row = Queue.objects.filter(name=name).values(*COLUMNS).first()
        recent = QueueTally.of(row).per_minute(now) if row is not None else 0
        return QueueStats(running, found["n"], found["oldest"], recent, key_running)
