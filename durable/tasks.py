"""Thin Celery tasks: each loads ids from its message and calls the engine.

Imported by Celery's autodiscovery; nothing else in durable imports Celery.

Each task starts as a Django request does: ``close_old_connections()`` drops a
connection past ``CONN_MAX_AGE`` or broken by an earlier error (a database
restart), so one failed task does not leave the worker on a dead connection.
(``configure(app)`` stops Celery's Django fixup from closing every connection
around every task; with ``CONN_MAX_AGE`` set, workers keep theirs.)
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_shutdown
from django.db import close_old_connections

from durable import runtime
from durable.runtime import get_engine
from durable.worker.tick import tick


@shared_task(name="durable.run_turn", ignore_result=True)
def run_turn(run_id: str) -> str | None:
    close_old_connections()
    result = get_engine().run_turn(run_id)
    # The plain value: the worker logs the task's return value as its repr.
    return None if result is None else result.value


@shared_task(name="durable.execute_step", ignore_result=True)
def execute_step(run_id: str, seq: int) -> str:
    close_old_connections()
    return get_engine().execute_step(run_id, seq).value


@shared_task(name="durable.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """All sweeps, announcing work through the transport (safe on many beats at once)."""
    return tick(get_engine(), execute=False)


# -- fleet advertisement: each worker says which queues and steps it serves ---------


@celeryd_after_setup.connect
def _advertise(sender: Any = None, instance: Any = None, **kwargs: Any) -> None:
    from durable.transports.celery import DEFAULT_QUEUE

    queues = list(instance.app.amqp.queues.consume_from.keys()) if instance is not None else []
    # A step without a route goes to the default queue; one routed there by name runs here too.
    runtime.serve_routes_eagerly(frozenset([*queues, *([None] if DEFAULT_QUEUE in queues else [])]))
    runtime.start_advertising(queues)


@worker_shutdown.connect
def _retire(**kwargs: Any) -> None:
    runtime.stop_advertising()
