"""Worker fleet: what each live worker serves, and whether a step can be served.

Each Celery worker advertises a descriptor (queues it consumes, the steps and
workflows registered in it, its capabilities and protocol version) with an
expiry, refreshed by a heartbeat thread. Before a turn writes a dispatched
step's pending checkpoint it asks :meth:`DbFleet.can_serve`; when no live
worker serves that step on its queue the run is parked ``blocked`` with the
reason, and a sweep re-checks it, instead of dispatching into a queue nobody
reads.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from durable.engine.clock import Clock
from durable.engine.core import AnyFleet as AnyFleet
from durable.engine.core import Fleet as Fleet
from durable.engine.registry import Registry
from durable.engine.requirements import required_by

logger = logging.getLogger("durable.fleet")

PROTOCOL_VERSION = 1
# A positive answer is trusted this long before asking the database again.
CACHE_SECONDS = 5.0


class DbFleet:
    """The fleet as advertised in the database: live workers' descriptors, cached briefly."""

    def __init__(self, store: Any, ttl: float, clock: Clock, default_queue: str = "durable") -> None:
        self._store = store
        self._ttl = ttl
        self._clock = clock
        self._default_queue = default_queue
        self._ok: dict[tuple[str, str], float] = {}
        self._subs: dict[str, set[str]] = {}
        self._subs_until = 0.0

    def can_serve(self, step: str, queue: str | None) -> bool:
        queue = queue or self._default_queue
        key = (step, queue)
        if self._ok.get(key, 0.0) > time.monotonic():
            return True
        for worker in self._store.live_workers(self._clock.now()):
            if queue in worker["queues"] and step in worker["steps"]:
                self._ok[key] = time.monotonic() + CACHE_SECONDS
                return True
        return False

    def subscribers(self, event: str) -> list[str]:
        """Workflows that live workers announce as subscribers of lifecycle ``event``."""
        if self._subs_until < time.monotonic():
            subs: dict[str, set[str]] = {}
            for worker in self._store.live_workers(self._clock.now()):
                for name, wfs in (worker["capabilities"] or {}).get("subscriptions", {}).items():
                    subs.setdefault(name, set()).update(wfs)
            self._subs = subs
            self._subs_until = time.monotonic() + CACHE_SECONDS
        return sorted(self._subs.get(event, ()))


class RequirementsFleet:
    """Without Celery: any step can be run, except one whose requirements no live worker has.

    A step with ``requires`` (its route ``"<queue>@gpu+pdf"``) needs a live
    worker (``durable_worker --capability``) that advertises those capabilities
    and has the step registered; the answer is cached like :class:`DbFleet`'s.
    """

    def __init__(self, store: Any, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._ok: dict[tuple[str, str], float] = {}

    def can_serve(self, step: str, queue: str | None) -> bool:
        needed = required_by(queue)
        if not needed:
            return True
        key = (step, queue or "")
        if self._ok.get(key, 0.0) > time.monotonic():
            return True
        for worker in self._store.live_workers(self._clock.now()):
            tags = set((worker["capabilities"] or {}).get("tags", ()))
            if needed <= tags and step in worker["steps"]:
                self._ok[key] = time.monotonic() + CACHE_SECONDS
                return True
        return False

    def subscribers(self, event: str) -> list[str]:
        return []


def descriptor(
    worker_id: str, queues: Iterable[str], capabilities: dict[str, Any] | None = None, *, registry: Registry
) -> dict[str, Any]:
    """What a worker advertises: where it runs, the queues it consumes, the definitions in its ``registry``."""
    return {
        "id": worker_id,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "queues": sorted(set(queues)),
        "steps": sorted(s.name for s in registry.steps()),
        "workflows": sorted(f"{w.name}:{w.version}" for w in registry.workflows()),
        "capabilities": {**(capabilities or {}), "subscriptions": _subscriptions(registry)},
        "protocol": PROTOCOL_VERSION,
    }


def _subscriptions(registry: Registry) -> dict[str, list[str]]:
    """Lifecycle events (``run.<ending>:<workflow>``) → the workflows here that subscribe."""
    subs: dict[str, list[str]] = {}
    for wf in registry.workflows():
        for event in wf.on_event:
            if event.startswith("run."):
                subs.setdefault(event, []).append(wf.name)
    return subs


class Advertiser:
    """Keeps this process's descriptor alive until :meth:`stop`."""

    def __init__(
        self,
        store: Any,
        worker_id: str,
        queues: Iterable[str],
        ttl: float,
        *,
        registry: Registry,
        clock: Clock,
        capabilities: Iterable[str] = (),
        namespaces: Iterable[str] | None = None,
    ) -> None:
        self._store = store
        self._tags = sorted(capabilities)
        # A scoped worker's namespaces (None: it serves all; the key is then absent).
        self._namespaces = sorted(namespaces) if namespaces is not None else None
        self._registry = registry
        self._clock = clock
        self._worker_id = worker_id
        self._queues = list(queues)
        self._ttl = ttl
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Advertise now and keep advertising; never raises.

        A worker may start while the database is down (restarting): its first
        advertisement then fails, and the heartbeat advertises it once the
        database is back. Without the heartbeat the worker would serve its
        queues unadvertised, and every run needing one of its steps would be
        parked ``blocked`` for good.
        """
        now = self._clock.now()
        try:
            self._store.advertise(self._descriptor(), now, now + timedelta(seconds=self._ttl))
        except Exception:
            logger.warning("fleet advertisement failed; the heartbeat will retry", exc_info=True)
        self._thread = threading.Thread(target=self._beat, name="durable-fleet", daemon=True)
        self._thread.start()

    def _descriptor(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"tags": self._tags}
        if self._namespaces is not None:
            extra["namespaces"] = self._namespaces
        return descriptor(self._worker_id, self._queues, extra, registry=self._registry)

    def _beat(self) -> None:
        from django.db import connection

        while not self._stop.wait(self._ttl / 3):
            try:
                now = self._clock.now()
                expires = now + timedelta(seconds=self._ttl)
                if not self._store.refresh_worker(self._worker_id, now, expires):
                    self._store.advertise(self._descriptor(), now, expires)
            except Exception:
                logger.warning("fleet heartbeat failed", exc_info=True)
            finally:
                connection.close()

    def stop(self) -> None:
        self._stop.set()
        try:
            self._store.retire_worker(self._worker_id)
        except Exception:
            logger.warning("could not retire worker %s", self._worker_id, exc_info=True)
