"""What the database says about the system now, in a handful of aggregate queries.

Read by the health check, the Prometheus endpoint and the admin. Every query
is an aggregate over an indexed status (no per-run rows are read, except up to
``SAMPLE`` ids of each kind of stale run for the admin), so a snapshot costs
the same with ten runs or ten million.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q
from django.db.models.functions import Coalesce

from durable import runtime
from durable.engine.namespaces import queue_for
from durable.engine.vocab import ACTIVE, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Run
from durable.observability.tenancy import NamespaceState, namespaces

# Steps without a queue go to the transport's default queue.
DEFAULT_QUEUE = "durable"
SAMPLE = 20
STALE_KINDS = ("running_past_lease", "suspended_past_wake", "steps_pending_too_long")


@dataclass(frozen=True)
class QueueState:
    """One queue: its ready pending steps, the oldest one's age, and its live workers (None: unknown)."""

    pending_steps: int = 0
    oldest_pending_seconds: float | None = None
    live_workers: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """The aggregates of one moment (``at``). Ages are in seconds."""

    at: datetime
    runs: dict[tuple[str, str], int]
    queues: dict[str, QueueState]
    most_overdue_timer_seconds: float | None
    stale: dict[str, int]
    stale_samples: dict[str, list[str]] = field(default_factory=dict)
    # Namespaces with work or a scoped worker (durable.observability.tenancy).
    namespaces: dict[str, NamespaceState] = field(default_factory=dict)

    def runs_by_status(self) -> dict[str, int]:
        totals = dict.fromkeys((str(s) for s in RunStatus), 0)
        for (_, status), count in self.runs.items():
            totals[status] = totals.get(status, 0) + count
        return totals

    @property
    def oldest_pending(self) -> tuple[str, float] | None:
        """(queue, age) of the oldest ready pending step."""
        aged = [(q.oldest_pending_seconds, name) for name, q in self.queues.items() if q.oldest_pending_seconds]
        if not aged:
            return None
        age, name = max(aged)
        return name, age


def _age(now: datetime, when: datetime | None) -> float | None:
    return None if when is None else max((now - when).total_seconds(), 0.0)


def take(now: datetime | None = None, *, samples: bool = False) -> Snapshot:
    """Read a :class:`Snapshot` of the default database (``samples``: with stale run ids)."""
    engine = runtime.get_engine()
    settings = engine.settings
    now = now or engine.clock.now()
    runs = {
        (row["workflow"], row["status"]): row["n"]
        for row in Run.objects.order_by().values("workflow", "status").annotate(n=Count("id"))
    }
    overdue = Run.objects.filter(status=RunStatus.SUSPENDED, wake_at__lt=now).aggregate(m=Min("wake_at"))["m"]
    queues = _queues(engine, now)
    stale_q = _stale_filters(now, settings.health_stale_after, settings.health_max_step_wait)
    stale = {kind: int(q.order_by().count()) for kind, q in stale_q.items()}
    found = {kind: _stale_ids(kind, q) for kind, q in stale_q.items()} if samples else {}
    return Snapshot(now, runs, queues, _age(now, overdue), stale, found, namespaces(engine, now))


def _ready_steps() -> Any:
    return Checkpoint.objects.filter(
        kind=CheckpointKind.STEP, status=CheckpointStatus.PENDING, run__status__in=ACTIVE
    ).annotate(ready_at=Coalesce("retry_at", "enqueued_at"))


def _queues(engine: Any, now: datetime) -> dict[str, QueueState]:
    """Ready steps and live Celery workers per broker queue (a namespace's own under ``NAMESPACE_QUEUES``)."""
    pending: dict[str, tuple[int, float | None]] = {}
    settings = engine.settings
    rows = _ready_steps().filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now)).order_by()
    rows = rows.values("queue", "run__namespace")
    for row in rows.annotate(n=Count("id"), oldest=Min("ready_at")):
        queue = queue_for(
            row["queue"],
            row["run__namespace"],
            own_queues=settings.namespace_queues,
            default=settings.default_namespace,
        )
        name = queue or DEFAULT_QUEUE  # (several rows when steps name the default queue and others none)
        count, oldest = pending.get(name, (0, None))
        ages = [a for a in (oldest, _age(now, row["oldest"])) if a is not None]
        pending[name] = (count + row["n"], max(ages) if ages else None)
    workers: dict[str, int] | None = None
    if engine.settings.transport == "celery":
        workers = {}
        for worker in engine.store.live_workers(now):
            for queue in worker.get("queues") or []:
                workers[queue] = workers.get(queue, 0) + 1
    names = set(pending) | set(workers or {})
    return {
        name: QueueState(
            pending_steps=pending.get(name, (0, None))[0],
            oldest_pending_seconds=pending.get(name, (0, None))[1],
            live_workers=None if workers is None else workers.get(name, 0),
        )
        for name in sorted(names)
    }


def _stale_filters(now: datetime, stale_after: float, max_step_wait: float) -> dict[str, Any]:
    """The three kinds of stale run, each as a queryset (of runs, or of steps)."""
    late = now - timedelta(seconds=stale_after)
    return {
        "running_past_lease": Run.objects.filter(status=RunStatus.RUNNING, locked_until__lt=late),
        "suspended_past_wake": Run.objects.filter(status=RunStatus.SUSPENDED, wake_at__lt=late),
        "steps_pending_too_long": _ready_steps().filter(ready_at__lt=now - timedelta(seconds=max_step_wait)),
    }


def _stale_ids(kind: str, qs: Any) -> list[str]:
    column = "run_id" if kind == "steps_pending_too_long" else "id"
    return list(dict.fromkeys(qs.order_by().values_list(column, flat=True)[:SAMPLE]))


def stale_runs(kind: str, now: datetime | None = None) -> Any:
    """The runs of one kind of stale (one of :data:`STALE_KINDS`), as a queryset of runs."""
    settings = runtime.get_engine().settings
    now = now or runtime.now()
    qs = _stale_filters(now, settings.health_stale_after, settings.health_max_step_wait)[kind]
    if kind == "steps_pending_too_long":
        return Run.objects.filter(id__in=qs.values("run_id"))
    return qs
