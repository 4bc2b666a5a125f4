"""Thin Celery tasks: each loads ids from its message and calls the engine.

Imported by Celery's autodiscovery; nothing else in durable imports Celery.

Each task starts as a Django request does: ``close_old_connections()`` drops a
connection past ``CONN_MAX_AGE`` or broken by an earlier error (a database
restart), so one failed task does not leave the worker on a dead connection.
(``configure(app)`` stops Celery's Django fixup from closing every connection
around every task; with ``CONN_MAX_AGE`` set, workers keep theirs.)
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown
from django.db import close_old_connections, connection

from durable import runtime
from durable.engine.namespaces import namespaces_of
from durable.engine.requirements import capabilities_of
from durable.runtime import get_engine
from durable.worker.tick import tick


@shared_task(name="durable.run_turn", ignore_result=True)
def run_turn(run_id: str) -> str | None:
    close_old_connections()
    result = get_engine().run_turn(run_id)
    # The plain value: the worker logs the task's return value as its repr.
    return None if result is None else result.value


@shared_task(name="durable.execute_step", ignore_result=True, bind=True)
def execute_step(self: Any, run_id: str, seq: int) -> str:
    close_old_connections()
    return get_engine().execute_step(run_id, seq, trace=_trace_of(self.request)).value


def _trace_of(request: Any) -> dict[str, str] | None:
    """The trace context the dispatching turn put in the message headers, if any."""
    headers = getattr(request, "headers", None) or {}
    found = {key: getattr(request, key, None) or headers.get(key) for key in ("traceparent", "tracestate")}
    carrier = {key: value for key, value in found.items() if isinstance(value, str)}
    return carrier or None


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
    # Consuming "<queue>@gpu" is what gives a Celery worker the capability gpu.
    runtime.serve_capabilities(capabilities_of(queues))
    runtime.start_advertising(queues, _namespaces_served(queues))
    # Before the pool forks: its processes inherit the frozen heap (see freeze_startup_heap).
    runtime.freeze_startup_heap()


def _namespaces_served(queues: list[str]) -> frozenset[str] | None:
    """Under ``NAMESPACE_QUEUES``, the namespaces whose queues this worker consumes (None: off, it serves all).

    The sweep queue carries no namespace's work. The worker's engine stays
    unscoped: the sweeps it runs only announce work, on each run's own queues.
    """
    settings = get_engine().settings
    if not settings.namespace_queues:
        return None
    work = [queue for queue in queues if queue != settings.sweep_queue]
    return namespaces_of(work, settings.default_namespace)


@worker_ready.connect
def _release_predecessors(sender: Any = None, **kwargs: Any) -> None:
    """End the leases of this host's dead processes (a killed predecessor's pool), then sweep at once.

    Only holders provably dead are touched (see
    :func:`durable.worker.predecessors.release_dead_holders`). The sweep is
    sent to the sweep queue, so the work is recovered without waiting for beat.
    """
    from durable.worker.predecessors import release_dead_holders

    try:
        counts = release_dead_holders(get_engine())
        if counts["runs"] or counts["steps"]:
            sweep.apply_async()
    except Exception:
        logging.getLogger("durable.celery").warning("could not release the leases of dead processes", exc_info=True)
    finally:
        # The worker's main process forks pool processes later: none may inherit this connection.
        connection.close()


@worker_shutdown.connect
def _retire(**kwargs: Any) -> None:
    runtime.stop_advertising()
