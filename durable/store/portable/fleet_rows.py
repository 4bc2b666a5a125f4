"""The worker fleet's descriptors (advertised, refreshed, retired and pruned), and the leases of dead holders."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from durable.engine.plan_steps import plan_lease_expiry
from durable.engine.ports import LeasesExpired
from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Run, WorkerDescriptor
from durable.store.portable.shared import StoreBase


class FleetRows(StoreBase):
    def advertise(self, descriptor: dict[str, Any], now: datetime, expires_at: datetime) -> None:
        WorkerDescriptor.objects.update_or_create(
            id=descriptor["id"], defaults={**descriptor, "heartbeat_at": now, "expires_at": expires_at}
        )

    def refresh_worker(self, worker_id: str, now: datetime, expires_at: datetime) -> bool:
        return bool(WorkerDescriptor.objects.filter(id=worker_id).update(heartbeat_at=now, expires_at=expires_at))

    def retire_worker(self, worker_id: str) -> None:
        WorkerDescriptor.objects.filter(id=worker_id).delete()

    def live_workers(self, now: datetime) -> list[dict[str, Any]]:
        return [dict(row) for row in WorkerDescriptor.objects.filter(expires_at__gt=now).values()]

    def prune_workers(self, now: datetime) -> int:
        return WorkerDescriptor.objects.filter(expires_at__lt=now - timedelta(hours=1)).delete()[0]

    def lease_holders(self, prefix: str, limit: int) -> list[str]:
        """Owners whose ids start with ``prefix`` and that hold a run's or a running step's lease."""
        runs = Run.objects.filter(status=RunStatus.RUNNING, locked_by__startswith=prefix)
        steps = Checkpoint.objects.filter(
            kind=CheckpointKind.STEP, status=CheckpointStatus.RUNNING, locked_by__startswith=prefix
        )
        found: set[str] = set()
        for rows in (runs, steps):
            found.update(o for o in rows.order_by().values_list("locked_by", flat=True).distinct()[:limit] if o)
        return sorted(found)[:limit]

    def expire_leases(self, owner: str, now: datetime) -> LeasesExpired:
        plan = plan_lease_expiry(owner, now)
        with transaction.atomic():
            runs = Run.objects.filter(status=plan.run_status, locked_by=plan.owner, locked_until__gt=plan.until).update(
                locked_until=plan.until
            )
            steps = Checkpoint.objects.filter(
                kind=plan.step_kind, status=plan.step_status, locked_by=plan.owner, wake_at__gt=plan.until
            ).update(wake_at=plan.until)
        return LeasesExpired(runs=runs, steps=steps)
