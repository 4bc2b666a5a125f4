"""The worker loop: polls the database for due work and runs it.

Used by ``manage.py durable_worker`` (deployments without Celery) and, in the
embedded default, by a daemon thread of the web process. Any number of loops
may run against one database: every claim is compare-and-set.
"""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections, connection

from durable import sweeps
from durable.runtime import get_engine

logger = logging.getLogger("durable.worker")


class WorkerLoop:
    """Run :func:`durable.sweeps.tick` until ``stop`` is set.

    ``stop`` is checked between items, so a stop request (SIGTERM) lets the
    item in progress finish and commit: a graceful drain.
    """

    def __init__(self, *, interval: float | None = None, stop: threading.Event | None = None) -> None:
        self.interval = interval
        self.stop = stop or threading.Event()

    def run_once(self) -> dict[str, int]:
        try:
            return sweeps.tick(get_engine(), execute=True, should_stop=self.stop.is_set)
        finally:
            # Inside a test's transaction the connection must stay as it is.
            if not connection.in_atomic_block:
                close_old_connections()

    def run_forever(self) -> None:
        while not self.stop.is_set():
            try:
                counts = self.run_once()
            except Exception:
                logger.exception("worker tick failed; retrying")
                counts = {}
            if not any(counts.values()):
                self.stop.wait(self.interval or get_engine().settings.worker_interval)
        transport = get_engine().transport
        shutdown = getattr(transport, "shutdown", None)
        if shutdown is not None:
            shutdown(wait=True)


_embedded: WorkerLoop | None = None
_embedded_lock = threading.Lock()


def start_embedded() -> WorkerLoop | None:
    """Start the worker loop in a daemon thread of this process, once.

    Does nothing unless the transport is ``inline`` and
    ``DURABLE["EMBEDDED_WORKER"]`` is true.
    """
    global _embedded
    settings = get_engine().settings
    if settings.transport != "inline" or not settings.embedded_worker:
        return None
    with _embedded_lock:
        if _embedded is None:
            _embedded = WorkerLoop()
            threading.Thread(target=_embedded.run_forever, name="durable-embedded-worker", daemon=True).start()
            logger.info("embedded durable worker started")
    return _embedded
