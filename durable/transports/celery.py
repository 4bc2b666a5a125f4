"""Celery transport: turns and dispatched steps as Celery tasks on Redis.

Messages carry ids only (``run_id``, ``seq``), serialised as JSON. Tasks are
acknowledged late and prefetched one at a time, so a worker killed mid-task
leaves its message to be re-delivered; whatever a lost message would have
done is re-derived from the database by the beat sweeps.

Routing: turns go to ``DEFAULT_QUEUE`` ("durable"). A step goes to its
``queue=``, else to the part of its name before the first dot
(``"payments.charge"`` → ``"payments"``), else to ``DEFAULT_QUEUE``. Run
``celery -A project worker -Q payments`` to serve only payment steps. With
``DURABLE["NAMESPACE_QUEUES"]``, a run of a namespace other than the default
one uses that namespace's queues instead (``"durable.ns.acme"``,
``"payments.ns.acme"``: :func:`durable.engine.namespaces.queue_for`), so
``-Q durable.ns.acme,payments.ns.acme`` serves only acme's runs.

Sweeps: beat sends ``durable.sweep`` every ``SWEEP_INTERVAL`` to
``SWEEP_QUEUE`` ("durable.sweeps"), a queue of their own. On the work queue a
sweep would wait behind the whole backlog (Redis lists are FIFO), and with it
the recovery of every orphaned run; on its own queue it waits at most for one
free worker process. Some worker must consume it: ``-Q durable,durable.sweeps``,
or a small dedicated one, ``-Q durable.sweeps -c 1``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durable.engine.namespaces import queue_for
from durable.engine.ports import Transport
from durable.transports.namespaces import RunNamespaces

if TYPE_CHECKING:
    from durable.engine.core import Engine

logger = logging.getLogger("durable.celery")

DEFAULT_QUEUE = "durable"
# Longer delays are not held in the broker (a worker would keep the message
# unacknowledged for that long); the beat sweep dispatches them when due.
MAX_COUNTDOWN = 60.0
SWEEP_TASK = "durable.sweep"
SWEEP_ENTRY = "durable-sweep"
# A sweep that waited this many intervals is dropped: the next one does the same work. More
# than one, so a second of clock skew between beat and the worker does not expire every sweep.
SWEEP_EXPIRES_INTERVALS = 2
# Tasks a worker process runs on one database connection (unless CELERY_DB_REUSE_MAX is set).
# A new connection prepares every statement again, and PostgreSQL plans the first five runs of
# each one per call: at 100 tasks a connection, that planning cost a limited queue's steps a
# fifth of their throughput (docs/benchmarks.md). Django's CONN_MAX_AGE still bounds its age.
DB_REUSE_MAX = 1000


class CeleryTransport(Transport):
    def __init__(self, get_engine: Callable[[], Engine] | None = None) -> None:
        """``get_engine``: the engine whose settings and store it reads (default: the process's)."""
        self._get_engine = get_engine or _process_engine
        self._namespaces = RunNamespaces(self._get_engine)

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        from durable.tasks import run_turn

        if delay > MAX_COUNTDOWN:
            return
        queue = self._queue(run_id, None, namespace) or DEFAULT_QUEUE
        run_turn.apply_async(args=[run_id], queue=queue, countdown=delay or None)

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> None:
        from durable.tasks import execute_step

        if delay > MAX_COUNTDOWN:
            return
        execute_step.apply_async(
            args=[run_id, seq],
            queue=self._queue(run_id, queue, namespace) or DEFAULT_QUEUE,
            countdown=delay or None,
            headers=_trace_headers(),
        )

    def _queue(self, run_id: str, route: str | None, namespace: str | None) -> str | None:
        """The broker queue of ``route`` for this run: its namespace's under ``NAMESPACE_QUEUES``."""
        settings = self._get_engine().settings
        if not settings.namespace_queues:
            return route
        found = self._namespaces.of(run_id, namespace)
        if found is None:
            return route  # the run is gone: its message finds nothing to do
        return queue_for(route, found, own_queues=True, default=settings.default_namespace)


def _process_engine() -> Engine:
    from durable import runtime

    return runtime.get_engine()


def _trace_headers() -> dict[str, str] | None:
    """The dispatching turn's trace context (``traceparent``...), carried by the step's message."""
    from durable import runtime

    observer = runtime.get_engine().observer
    return observer.current() if observer.enabled else None


def configure(app: Any) -> None:
    """Apply durable's Celery settings and beat schedule to ``app``.

    Call it from your project's ``celery.py`` after ``config_from_object``.
    The ``durable-sweep`` beat entry sends ``durable.sweep`` every
    ``DURABLE["SWEEP_INTERVAL"]`` to ``DURABLE["SWEEP_QUEUE"]`` (default
    ``"durable.sweeps"``), dropped if not started within two intervals; the task
    is routed there too when sent by hand. Run a worker that consumes that
    queue (``celery -A proj worker -Q durable,durable.sweeps``). An entry of
    that name already in ``beat_schedule`` is kept as it is. It also lowers
    Celery's per-task INFO lines about the sweep to DEBUG
    (:mod:`durable.transports.celery_logs`).
    """
    from durable.transports.celery_logs import quiet_sweep_logs

    quiet_sweep_logs()
    interval, queue = sweep_schedule()
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
    routes = app.conf.task_routes
    if routes is None or isinstance(routes, dict):
        app.conf.task_routes = {SWEEP_TASK: {"queue": queue}, **(routes or {})}
    schedule = dict(app.conf.beat_schedule or {})
    schedule.setdefault(
        SWEEP_ENTRY,
        {
            "task": SWEEP_TASK,
            "schedule": interval,
            "options": {"queue": queue, "expires": interval * SWEEP_EXPIRES_INTERVALS},
        },
    )
    app.conf.beat_schedule = schedule


def sweep_schedule() -> tuple[float, str]:
    """``SWEEP_INTERVAL`` and ``SWEEP_QUEUE`` of ``settings.DURABLE`` (the defaults before Django is configured).

    Raises ImproperlyConfigured if ``settings.DURABLE`` does not parse.
    """
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from durable import conf

    try:
        raw = getattr(settings, "DURABLE", None)
    except ImproperlyConfigured:  # no Django settings yet: configure() was called first
        return float(conf.DEFAULTS["SWEEP_INTERVAL"]), str(conf.DEFAULTS["SWEEP_QUEUE"])
    parsed = conf.parse(raw)
    return parsed.sweep_interval, parsed.sweep_queue


def beat_sweep_queue() -> str | None:
    """The queue the current Celery app's ``durable-sweep`` beat entry sends to (None: no such entry)."""
    try:
        from celery import current_app
    except ImportError:
        return None
    entry = (current_app.conf.beat_schedule or {}).get(SWEEP_ENTRY)
    if not isinstance(entry, dict):
        return None
    options = entry.get("options") or {}
    return str(options.get("queue") or current_app.conf.task_default_queue or DEFAULT_QUEUE)


def ping_broker(timeout: float) -> str | None:
    """Connect once to the broker: None when it answers, else the error.

    The broker is ``CELERY_BROKER_URL`` (with ``CELERY_BROKER_TRANSPORT_OPTIONS``)
    when set, so a web process that never imported the project's Celery app
    checks the broker its workers use; otherwise the current Celery app's.
    """
    from celery import current_app
    from django.conf import settings

    url = getattr(settings, "CELERY_BROKER_URL", None)
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None)
    try:
        with current_app.connection_for_write(url, transport_options=options) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - reported by the health check
        return f"{type(exc).__name__}: {exc}"
    return None
