"""Namespaces with work and the live workers that serve them (scoped workers, ``durable_worker --namespace``).

Read by the health check and the admin's workers page. A namespace's work is
its due runs (pending, or suspended with their wake due) and its ready
pending steps, two aggregate queries grouped by namespace. Whether a worker
serves it is known only when the fleet tells: with Celery (every worker
advertises itself), or when some live worker advertises a namespace scope
(a scoped deployment). A live worker that advertises no scope serves every
namespace. Otherwise (the inline transport's embedded worker does not
advertise) ``live_workers`` is None: unknown, never reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q

from durable.engine.vocab import ACTIVE, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Run


@dataclass(frozen=True)
class NamespaceState:
    """One namespace's due runs, ready pending steps, and the live workers serving it (None: unknown)."""

    pending_runs: int = 0
    pending_steps: int = 0
    live_workers: int | None = None

    @property
    def unserved(self) -> bool:
        """It has work and no live worker serves it (as far as the fleet tells)."""
        return bool(self.pending_runs or self.pending_steps) and self.live_workers == 0


def worker_namespaces(worker: dict[str, Any]) -> list[str] | None:
    """The namespaces a live worker's descriptor says it serves (None: every namespace)."""
    found = (worker.get("capabilities") or {}).get("namespaces")
    return None if found is None else list(found)


def namespaces(engine: Any, now: datetime) -> dict[str, NamespaceState]:
    """Every namespace with work, and every namespace a live worker is scoped to."""
    runs = Run.objects.filter(Q(status=RunStatus.PENDING) | Q(status=RunStatus.SUSPENDED, wake_at__lte=now))
    due = {row["namespace"]: row["n"] for row in runs.order_by().values("namespace").annotate(n=Count("id"))}
    steps = Checkpoint.objects.filter(kind=CheckpointKind.STEP, status=CheckpointStatus.PENDING, run__status__in=ACTIVE)
    steps = steps.filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
    ready = {
        row["run__namespace"]: row["n"] for row in steps.order_by().values("run__namespace").annotate(n=Count("id"))
    }
    scopes = [worker_namespaces(w) for w in engine.store.live_workers(now)]
    known = engine.settings.transport == "celery" or any(scope is not None for scope in scopes)
    names = set(due) | set(ready) | {name for scope in scopes for name in scope or ()}

    def serving(name: str) -> int | None:
        return sum(scope is None or name in scope for scope in scopes) if known else None

    return {name: NamespaceState(due.get(name, 0), ready.get(name, 0), serving(name)) for name in sorted(names)}
