"""The process-wide engine, built from settings on first use and rebuilt when they change."""

from __future__ import annotations

import threading

from durable import conf
from durable.engine.core import Engine, make_owner_id
from durable.engine.leases import LeaseKeeper
from durable.transports import build

_lock = threading.Lock()
_engine: Engine | None = None
_owner = make_owner_id()
_keeper: LeaseKeeper | None = None


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
        _engine = Engine(store, transport, settings, owner=_owner, keeper=_keeper)
        if old is not None:
            _engine.listeners = old.listeners
            shutdown = getattr(old.transport, "shutdown", None)
            if shutdown is not None:
                shutdown()
        return _engine
