"""The process-wide engine, built from settings on first use and rebuilt when they change."""

from __future__ import annotations

import os
import threading

from durable import conf
from durable.engine.core import Engine, Fleet, make_owner_id
from durable.engine.leases import LeaseKeeper
from durable.engine.listeners import Listeners
from durable.transports import build

_lock = threading.Lock()
_engine: Engine | None = None
_owner = make_owner_id()
_keeper: LeaseKeeper | None = None
# Step routes this process's Celery worker consumes (kept across fork: the pool inherits them).
_eager_routes: frozenset[str | None] = frozenset()


def _after_fork() -> None:
    # A forked child (Celery prefork) is another lease holder: it needs its own
    # identity, its own keeper thread and its own transport threads.
    global _lock, _engine, _owner, _keeper
    _lock = threading.Lock()
    _engine = None
    _owner = make_owner_id()
    _keeper = None


os.register_at_fork(after_in_child=_after_fork)


def _close_connection() -> None:
    from django.db import connection

    connection.close()


def get_engine() -> Engine:
    """The engine for the current settings (``override_settings``-safe)."""
    global _engine, _keeper
    settings = conf.get()
    engine = _engine
    if engine is not None and engine.settings is settings:
        return engine
    with _lock:
        if _engine is not None and _engine.settings is settings:
            return _engine
        if _keeper is None:
            _keeper = LeaseKeeper(close_connection=_close_connection)
        from durable.store import store

        old = _engine
        transport = build(settings.transport, get_engine, settings.worker_threads)
        if old is not None:
            listeners = old.listeners
        else:
            from durable import signals

            listeners = Listeners()
            listeners.add(signals.send_status)
            listeners.add_lifecycle(signals.send_lifecycle)
        _engine = Engine(
            store,
            transport,
            settings,
            owner=_owner,
            keeper=_keeper,
            fleet=_fleet(settings, store),
            eager_routes=_eager_routes,
            listeners=listeners,
        )
        if old is not None:
            shutdown = getattr(old.transport, "shutdown", None)
            if shutdown is not None:
                shutdown()
        return _engine


def serve_routes_eagerly(routes: frozenset[str | None]) -> None:
    """Declare the step routes this worker process consumes (see ``EAGER_STEPS``)."""
    global _eager_routes
    _eager_routes = routes
    if _engine is not None:
        _engine.eager_routes = routes


def _fleet(settings: conf.DurableSettings, store: object) -> Fleet:
    from durable.fleet import AnyFleet, DbFleet

    if settings.transport == "celery" and settings.fleet_check:
        return DbFleet(store, settings.fleet_ttl)
    return AnyFleet()
