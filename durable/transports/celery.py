"""Celery transport: turns and dispatched steps as Celery tasks on Redis.

Messages carry ids only (``run_id``, ``seq``), serialised as JSON. Tasks are
acknowledged late and prefetched one at a time, so a worker killed mid-task
leaves its message to be re-delivered; whatever a lost message would have
done is re-derived from the database by the beat sweeps.

Routing: turns go to ``DEFAULT_QUEUE`` ("durable"). A step goes to its
``queue=``, else to the part of its name before the first dot
(``"payments.charge"`` → ``"payments"``), else to ``DEFAULT_QUEUE``. Run
``celery -A project worker -Q payments`` to serve only payment steps.
"""

from __future__ import annotations

import logging
from typing import Any

from durable.engine.ports import Transport

logger = logging.getLogger("durable.celery")

DEFAULT_QUEUE = "durable"
# Longer delays are not held in the broker (a worker would keep the message
# unacknowledged for that long); the beat sweep dispatches them when due.
MAX_COUNTDOWN = 60.0
SWEEP_EVERY = 2.0
# Tasks a worker process runs on one database connection (unless CELERY_DB_REUSE_MAX is set).
DB_REUSE_MAX = 100


class CeleryTransport(Transport):
    def dispatch_turn(self, run_id: str, *, delay: float = 0.0) -> None:
        from durable.tasks import run_turn

        if delay > MAX_COUNTDOWN:
            return
        run_turn.apply_async(args=[run_id], queue=DEFAULT_QUEUE, countdown=delay or None)

    def dispatch_step(self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0) -> None:
        from durable.tasks import execute_step

        if delay > MAX_COUNTDOWN:
            return
        execute_step.apply_async(args=[run_id, seq], queue=queue or DEFAULT_QUEUE, countdown=delay or None)


def configure(app: Any) -> None:
    """Apply durable's Celery settings and beat schedule to ``app``.

    Call it from your project's ``celery.py`` after ``config_from_object``.
    """
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue=DEFAULT_QUEUE,
    )
    if app.conf.get("CELERY_DB_REUSE_MAX") is None:
        # Celery's Django fixup otherwise closes every database connection before and
        # after every task: each turn and step would pay for a new PostgreSQL connection.
        app.conf["CELERY_DB_REUSE_MAX"] = DB_REUSE_MAX
    schedule = dict(app.conf.beat_schedule or {})
    schedule.setdefault(
        "durable-sweep",
        {
            "task": "durable.sweep",
            "schedule": SWEEP_EVERY,
            "options": {"queue": DEFAULT_QUEUE, "expires": SWEEP_EVERY * 5},
        },
    )
    app.conf.beat_schedule = schedule
