"""Singleton keys: admission of new runs, hand-over of freed slots, keys with waiting runs (ORM).

Executes the plans of :mod:`durable.engine.plan_singletons`. Every admission
of a key first locks the key's :class:`~durable.models.SingletonSlot` row
(created on the key's first run): ``SELECT ... FOR UPDATE`` where the
database has row locks; SQLite takes its one write lock at ``BEGIN
IMMEDIATE`` (see :mod:`durable.sqlite`). The key's state is then counted
from the runs themselves, so a slot can never be lost by a counter that
missed a write: a run frees its slot by leaving the holding statuses, and
the next admission of its key sees it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count

from durable.engine.plan_singletons import (
    KeyState,
    admitted_columns,
    plan_admission,
    plan_hand_over,
    waiting_reason,
)
from durable.engine.ports import Admitted
from durable.engine.vocab import ACTIVE, SLOT_HOLDING, RunStatus
from durable.models import Run, SingletonSlot
from durable.store.portable.shared import StoreBase

NOT_CREATED = Admitted(created=False)


class SingletonRows(StoreBase):
    def admit_run(self, fields: dict[str, Any], max_queue_depth: int | None, now: datetime) -> Admitted:
        """Insert a new run of a singleton workflow, ``pending`` or ``queued`` as its key decides.

        Idempotent on the run id: an existing id returns ``created=False``
        and writes nothing, even when the key's queue is full. Raises
        :class:`~durable.QueueFull` (nothing written) when ``max_queue_depth``
        is set and reached. The runs made pending are announced to listening
        workers (:meth:`_announce`) in the same transaction.
        """
        if Run.objects.filter(id=fields["id"]).exists():
            return NOT_CREATED
        with transaction.atomic():
            result = self._admit_new(fields, max_queue_depth, now)
            self._announce(([fields["id"]] if result.status == RunStatus.PENDING else []) + list(result.admitted))
            return result

    def _admit_new(self, fields: dict[str, Any], max_queue_depth: int | None, now: datetime) -> Admitted:
        """:meth:`admit_run` inside the caller's transaction (a commit inserting children, a schedule)."""
        workflow, key, limit = fields["workflow"], fields["singleton_key"], fields["singleton_limit"]
        slot = self._lock_slot(workflow, key, limit, now)
        if Run.objects.filter(id=fields["id"]).exists():  # a concurrent start of the same id won
            return NOT_CREATED
        plan = plan_admission(workflow, key, limit, max_queue_depth, self._key_state(workflow, key, slot.tail))
        admitted = self._admit_head(workflow, key, plan.promote, now)
        SingletonSlot.objects.filter(pk=slot.pk).update(tail=plan.seq, limit=limit, updated_at=now)
        row = {**fields, "status": plan.status, "singleton_seq": plan.seq}
        if plan.reason is not None:
            row["error"] = plan.reason
        Run.objects.bulk_create([Run(**row)])
        return Admitted(True, plan.status, tuple(admitted))

    def hand_over(self, workflow: str, key: str, now: datetime) -> list[str]:
        """Admit the oldest waiting runs of ``key`` into its free slots; return them (to dispatch)."""
        with transaction.atomic():
            slot = SingletonSlot.objects.select_for_update().filter(workflow=workflow, key=key).first()
            if slot is None:
                return []
            state = self._key_state(workflow, key, slot.tail)
            return self._admit_head(workflow, key, plan_hand_over(slot.limit, state.holders, state.waiting), now)

    def waiting_keys(self, limit: int) -> list[tuple[str, str]]:
        """Keys with runs waiting for a slot (at most ``limit``), for the admission sweep."""
        rows = Run.objects.filter(status=RunStatus.QUEUED).values_list("workflow", "singleton_key").distinct()
        return [(workflow, key) for workflow, key in rows.order_by()[:limit] if key is not None]

    def _hand_over_runs(self, run_ids: list[str], now: datetime) -> list[str]:
        """Hand over the slots the singleton runs among ``run_ids`` freed (they just left a holding status)."""
        keys = (
            Run.objects.filter(id__in=run_ids, singleton_key__isnull=False)
            .values_list("workflow", "singleton_key")
            .distinct()
            .order_by()
        )
        admitted: list[str] = []
        for workflow, key in sorted(keys):
            if key is not None:
                admitted += self.hand_over(workflow, key, now)
        return admitted

    def _readmit(self, run_id: str, now: datetime) -> None:
        """A requeued singleton run waits for its key again, behind the runs already waiting."""
        found = (
            Run.objects.filter(id=run_id, status=RunStatus.PENDING, singleton_key__isnull=False)
            .values_list("workflow", "singleton_key", "singleton_limit")
            .first()
        )
        if found is None or found[1] is None:
            return
        workflow, key, limit = found[0], found[1], found[2] or 1
        slot = self._lock_slot(workflow, key, limit, now)
        seq = slot.tail + 1
        reason = waiting_reason(workflow, key, slot.limit)
        Run.objects.filter(id=run_id).update(status=RunStatus.QUEUED, singleton_seq=seq, error=reason)
        SingletonSlot.objects.filter(pk=slot.pk).update(tail=seq, updated_at=now)
        state = self._key_state(workflow, key, seq)
        self._admit_head(workflow, key, plan_hand_over(slot.limit, state.holders, state.waiting), now)

    @staticmethod
    def _lock_slot(workflow: str, key: str, limit: int, now: datetime) -> SingletonSlot:
        """The key's slot row, created if new, locked until the transaction ends."""
        SingletonSlot.objects.bulk_create(
            [SingletonSlot(workflow=workflow, key=key, limit=limit, updated_at=now)], ignore_conflicts=True
        )
        return SingletonSlot.objects.select_for_update().get(workflow=workflow, key=key)

    @staticmethod
    def _key_state(workflow: str, key: str, tail: int) -> KeyState:
        counts = dict(
            Run.objects.filter(workflow=workflow, singleton_key=key, status__in=ACTIVE)
            .values_list("status")
            .annotate(n=Count("id"))
            .order_by()
        )
        holders = sum(n for status, n in counts.items() if status in SLOT_HOLDING)
        return KeyState(holders=holders, waiting=counts.get(RunStatus.QUEUED, 0), tail=tail)

    @staticmethod
    def _admit_head(workflow: str, key: str, count: int, now: datetime) -> list[str]:
        """Admit the ``count`` oldest waiting runs of the key (the caller holds the slot lock)."""
        if count <= 0:
            return []
        queued = Run.objects.filter(workflow=workflow, singleton_key=key, status=RunStatus.QUEUED)
        ids = list(queued.order_by("singleton_seq").values_list("id", flat=True)[:count])
        Run.objects.filter(id__in=ids, status=RunStatus.QUEUED).update(**admitted_columns(now))
        return ids
