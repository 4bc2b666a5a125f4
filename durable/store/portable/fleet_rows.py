"""The worker fleet's descriptors: advertised, refreshed, retired and pruned."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from durable.models import WorkerDescriptor
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
