"""The health check: is the database answering, the broker reachable, and is work moving?

:func:`check` answers a JSON-ready body and whether it is healthy. Unhealthy
when any of these holds (each is named in ``problems``):

* the database does not answer;
* the transport is Celery and its broker does not answer;
* a queue has ready pending steps and no live worker advertises it
  (Celery: workers advertise their queues, see :mod:`durable.fleet`);
* the oldest ready pending step has waited longer than ``HEALTH_MAX_STEP_WAIT``;
* the most overdue wake of a suspended run is later than ``HEALTH_MAX_TIMER_LATENESS``;
* a run is ``running`` past its lease by more than ``HEALTH_STALE_AFTER``
  (its worker died and no sweep took it over);
* a namespace has due runs or ready steps and no live worker serves it
  (scoped workers, ``durable_worker --namespace``; see
  :mod:`durable.observability.tenancy` for when that is known).

The body holds counts and ages only (no run ids, no payloads), so it may be
served to an unauthenticated probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from durable import runtime
from durable.observability import snapshot
from durable.observability.snapshot import Snapshot

BROKER_TIMEOUT = 3.0


@dataclass(frozen=True)
class Health:
    """A verdict and the body that explains it."""

    healthy: bool
    body: dict[str, Any]


def _database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - reported, not raised: this is the check
        return f"{type(exc).__name__}: {exc}"
    return None


def _broker() -> str | None:
    from durable.transports.celery import ping_broker

    return ping_broker(BROKER_TIMEOUT)


def check() -> Health:
    """Run every check once; never raises (a failing check is a problem in the body)."""
    settings = runtime.get_engine().settings
    problems: list[str] = []
    body: dict[str, Any] = {"status": "ok", "problems": problems}
    db_error = _database()
    body["database"] = {"ok": db_error is None, "error": db_error}
    if db_error is not None:
        problems.append("database unreachable")
    if settings.transport == "celery":
        broker_error = _broker()
        body["broker"] = {"ok": broker_error is None, "error": broker_error}
        if broker_error is not None:
            problems.append("broker unreachable")
    else:
        body["broker"] = None
    if db_error is None:
        try:
            _judge(snapshot.take(), settings, body, problems)
        except Exception as exc:  # noqa: BLE001 - a failed read is a problem of the database
            problems.append(f"could not read the state: {type(exc).__name__}: {exc}")
    if problems:
        body["status"] = "unhealthy"
    return Health(not problems, body)


def _judge(snap: Snapshot, settings: Any, body: dict[str, Any], problems: list[str]) -> None:
    body["checked_at"] = snap.at.isoformat()
    body["queues"] = {
        name: {
            "live_workers": q.live_workers,
            "pending_steps": q.pending_steps,
            "oldest_pending_step_seconds": q.oldest_pending_seconds,
        }
        for name, q in snap.queues.items()
    }
    orphaned = [name for name, q in snap.queues.items() if q.pending_steps and q.live_workers == 0]
    body["queues_without_workers"] = orphaned
    for name in orphaned:
        problems.append(f"queue {name!r} has pending steps and no live worker")
    oldest = snap.oldest_pending
    limit = settings.health_max_step_wait
    body["oldest_pending_step"] = {
        "queue": oldest[0] if oldest else None,
        "age_seconds": oldest[1] if oldest else None,
        "threshold_seconds": limit,
    }
    if oldest and oldest[1] > limit:
        problems.append(f"a step on queue {oldest[0]!r} has waited {oldest[1]:.0f}s (threshold {limit:.0f}s)")
    late, limit = snap.most_overdue_timer_seconds, settings.health_max_timer_lateness
    body["most_overdue_timer"] = {"age_seconds": late, "threshold_seconds": limit}
    if late is not None and late > limit:
        problems.append(f"a due wake is {late:.0f}s late (threshold {limit:.0f}s)")
    body["stale_runs"] = {**snap.stale, "threshold_seconds": settings.health_stale_after}
    if snap.stale["running_past_lease"]:
        problems.append(f"{snap.stale['running_past_lease']} run(s) running past their lease")
    body["runs"] = snap.runs_by_status()
    _judge_namespaces(snap, body, problems)


def _judge_namespaces(snap: Snapshot, body: dict[str, Any], problems: list[str]) -> None:
    body["namespaces"] = {
        name: {"pending_runs": n.pending_runs, "pending_steps": n.pending_steps, "live_workers": n.live_workers}
        for name, n in snap.namespaces.items()
    }
    unserved = [name for name, n in snap.namespaces.items() if n.unserved]
    body["namespaces_without_workers"] = unserved
    for name in unserved:
        problems.append(f"namespace {name!r} has work and no live worker serves it")
