"""The only process-wide state of django-durable, and the object graph built from it.

This module builds, once per settings value, the store, transport, fleet and
engine, and holds everything else that is per process: the settings cache,
the current clock, the default registry the decorators register into, the
lease keeper, the owner id, the step routes served eagerly, the embedded
worker loop and the fleet advertiser. No other module of durable keeps
mutable module-level state; code that needs a dependency receives it (an
engine, a store, a client) or asks this module.

Concurrency: the graph is built under a lock, so threads racing for the
first engine get the same one. A settings change (``override_settings``)
builds a new engine on the next call and shuts the old one's transport down.
``os.fork`` (Celery prefork) gives the child its own owner id, lease keeper,
engine and transport threads; the parent's are unusable there.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durable.engine.clock import Clock, SystemClock
from durable.engine.core import Engine, Fleet, make_owner_id
from durable.engine.faults import NO_FAULTS, StepFaults
from durable.engine.history_cache import HistoryCache
from durable.engine.leases import LeaseKeeper
from durable.engine.listeners import Listeners
from durable.engine.observe import Observer
from durable.engine.registry import Registry
from durable.transports import build

if TYPE_CHECKING:
    from durable import conf
    from durable.client import Client
    from durable.fleet import Advertiser
    from durable.store.portable import PortableStore
    from durable.worker.loop import WorkerLoop

_lock = threading.Lock()
_settings_lock = threading.Lock()
_settings: conf.DurableSettings | None = None
_engine: Engine | None = None
_client: Client | None = None
# The store chosen for each connection vendor (see durable.store.factory), kept for the process:
# a PostgreSQL store holds its own preparing cursors and column casts.
_stores: dict[str, PortableStore] = {}
_owner = make_owner_id()
_keeper: LeaseKeeper | None = None
# Step routes this process's Celery worker consumes (kept across fork: the pool inherits them).
_eager_routes: frozenset[str | None] = frozenset()
# Capabilities of this process's workers (step requirements: durable.engine.requirements).
_capabilities: frozenset[str] = frozenset()
# Namespaces this process's worker serves (durable_worker --namespace); None: every namespace.
_namespaces: frozenset[str] | None = None
_clock: Clock = SystemClock()
_embedded: WorkerLoop | None = None
_embedded_lock = threading.Lock()
_advertiser: Advertiser | None = None
# The OpenTelemetry observer (``OPENTELEMETRY``): one per process, so its instruments are made once.
_otel: Observer | None = None


class _ForwardingFaults(StepFaults):
    """The step faults engines get: runs whichever are installed (see :func:`install_faults`)."""

    def __init__(self) -> None:
        self.target: StepFaults = NO_FAULTS

    def run(self, name: str, body: Callable[[], Any]) -> Any:
        return self.target.run(name, body)


# Step faults a test installed (durable.testing.inject_failure / inject_crash); read at every step.
_faults = _ForwardingFaults()

#: The registry ``@durable.workflow`` and ``@durable.step`` register into; the engine reads it.
registry = Registry()


# -- settings -------------------------------------------------------------------------


def settings() -> conf.DurableSettings:
    """The validated ``settings.DURABLE``, parsed once and again after each change of it.

    Parsed under a lock: threads racing for the first value get the same
    object, so none of them sees "new settings" and rebuilds the engine.
    """
    global _settings
    current = _settings
    if current is not None:
        return current
    with _settings_lock:
        if _settings is None:
            # Django is imported on first use, not with this module: ``import durable`` (the
            # decorators register here) stays free of Django for the engine's own tests.
            from django.core.signals import setting_changed

            from durable import conf

            setting_changed.connect(_settings_changed, dispatch_uid="durable.runtime.settings")
            _settings = conf.parse_django_settings()
        return _settings


def _settings_changed(*, setting: str, **_: Any) -> None:
    global _settings
    from durable import conf

    if setting in conf.WATCHED_SETTINGS:
        _settings = None


# -- clock ----------------------------------------------------------------------------


def install_clock(clock: Clock) -> Clock:
    """Make ``clock`` the process-wide clock; return the previous one to restore later.

    Engines built here read time through :data:`clock`, which follows installs,
    so a fake clock takes effect at once without rebuilding anything.
    """
    global _clock
    previous, _clock = _clock, clock
    return previous


def install_faults(faults: StepFaults) -> StepFaults:
    """Make ``faults`` run around every step body in this process; return the previous ones.

    Engines hold a forwarder to the installed faults, so an install takes
    effect at once without rebuilding anything (as :func:`install_clock`).
    """
    previous, _faults.target = _faults.target, faults
    return previous


def now() -> datetime:
    """The current time on the installed clock (timezone-aware, UTC)."""
    return _clock.now()


def current_clock() -> Clock:
    return _clock


def is_fake() -> bool:
    """True while a clock other than the system clock is installed (a test's fake clock)."""
    return not isinstance(_clock, SystemClock)


class _InstalledClock:
    """The clock engines get: reads whichever clock is installed (see :func:`install_clock`)."""

    def now(self) -> datetime:
        return _clock.now()


#: A clock that follows :func:`install_clock`; passed to every engine built here.
clock: Clock = _InstalledClock()


# -- fork -----------------------------------------------------------------------------


def _after_fork() -> None:
    # A forked child (Celery prefork) is another lease holder: it needs its own
    # identity, its own keeper thread and its own transport threads.
    global _lock, _settings_lock, _engine, _client, _owner, _keeper
    _lock = threading.Lock()
    _settings_lock = threading.Lock()
    _engine = None
    _client = None
    _owner = make_owner_id()
    _keeper = None


os.register_at_fork(after_in_child=_after_fork)


# -- the engine -----------------------------------------------------------------------


def _close_connection() -> None:
    from django.db import connection

    connection.close()


def default_store() -> PortableStore:
    """The store for the default database connection, chosen once per vendor by the store factory."""
    from django.db import connection

    store = _stores.get(connection.vendor)
    if store is None:
        from durable.store import factory

        store = _stores.setdefault(connection.vendor, factory.for_connection(connection))
    return store


def get_engine() -> Engine:
    """The engine for the current settings (``override_settings``-safe)."""
    current = settings()
    engine = _engine
    if engine is not None and engine.settings is current:
        return engine
    with _lock:
        if _engine is not None and _engine.settings is current:
            return _engine
        return _build_engine(current)


def _build_engine(current: conf.DurableSettings) -> Engine:
    """Build the engine for ``current`` settings (under ``_lock``), carrying the listeners over.

    The engine is never changed once built: a new settings value or new eager
    routes build a new one, and the old one's transport is shut down.
    """
    global _engine, _keeper
    if _keeper is None:
        _keeper = LeaseKeeper(close_connection=_close_connection)
    store = default_store()
    old = _engine
    if old is not None:
        listeners = old.listeners
    else:
        from durable import signals

        listeners = Listeners()
        listeners.add(signals.send_status)
        listeners.add_lifecycle(signals.send_lifecycle)
    _engine = Engine(
        store,
        build(current.transport, get_engine, current.worker_threads),
        current,
        registry=registry,
        clock=clock,
        owner=_owner,
        keeper=_keeper,
        fleet=_fleet(current, store),
        eager_routes=_eager_routes,
        capabilities=_capabilities,
        namespaces=_namespaces,
        listeners=listeners,
        observer=_observer(current),
        faults=_faults,
        # Each engine its own cache: a new engine (settings, fork) starts empty, which is only a miss.
        histories=HistoryCache(
            current.history_cache_size, current.history_cache_idle, current.history_cache_checkpoints
        ),
    )
    if old is not None:
        old.transport.shutdown()
    return _engine


def _observer(current: conf.DurableSettings) -> Observer | None:
    """This process's OpenTelemetry observer (one, built on first use) when ``OPENTELEMETRY`` is on."""
    global _otel
    if not current.opentelemetry:
        return None
    if _otel is None:
        from durable.observability.otel import OtelObserver

        _otel = OtelObserver()
    return _otel


def client() -> Client:
    """The default :class:`~durable.client.Client`, on the current engine (``durable.start`` and friends use it)."""
    global _client
    engine = get_engine()
    current = _client
    if current is not None and current.engine is engine:
        return current
    from durable.client import Client

    current = _client = Client(engine)
    return current


def serve_routes_eagerly(routes: frozenset[str | None]) -> None:
    """Declare the step routes this worker process consumes (see ``EAGER_STEPS``).

    An engine already built is replaced by one serving these routes.
    """
    global _eager_routes
    with _lock:
        _eager_routes = routes
        if _engine is not None and _engine.eager_routes != routes:
            _build_engine(_engine.settings)


def serve_capabilities(capabilities: frozenset[str]) -> None:
    """Declare what this worker process has (``durable_worker --capability``; a Celery worker's queues).

    Steps that require more are left to other workers. An engine already built
    is replaced by one with these capabilities.
    """
    global _capabilities
    with _lock:
        _capabilities = capabilities
        if _engine is not None and _engine.capabilities != capabilities:
            _build_engine(_engine.settings)


def serve_namespaces(namespaces: frozenset[str] | None) -> None:
    """Scope this worker process to ``namespaces`` (``durable_worker --namespace``; None: all).

    Its sweeps then take only those namespaces' runs and steps. An engine
    already built is replaced by one with this scope.
    """
    global _namespaces
    with _lock:
        _namespaces = namespaces
        if _engine is not None and _engine.namespaces != namespaces:
            _build_engine(_engine.settings)


def _fleet(current: conf.DurableSettings, store: object) -> Fleet:
    from durable.fleet import AnyFleet, DbFleet, RequirementsFleet

    if current.transport == "celery" and current.fleet_check:
        return DbFleet(store, current.fleet_ttl, clock)
    if current.fleet_check:
        # Without Celery only steps with requirements need a live worker that has them.
        return RequirementsFleet(store, clock)
    return AnyFleet()


# -- the worker loop and fleet advertisement of this process ---------------------------


def freeze_startup_heap() -> None:
    """Put every object alive now out of the cyclic collector's reach: for a worker process, once loaded.

    A worker keeps Django's and the project's modules, models and settings
    (tens of thousands of long-lived objects) for its whole life, and every
    full collection walked them all again: a pause of tens of milliseconds
    in the middle of a page of turns. Frozen, they are never scanned again;
    what is created later is collected as before. Called in a Celery
    worker's main process before its pool forks, the children share those
    pages instead of copying them when the collector would have touched
    them. Process-wide and idempotent (a second call freezes what came since).
    """
    gc.collect()
    gc.freeze()


def start_embedded_worker() -> WorkerLoop | None:
    """Start the worker loop in a daemon thread of this process, once (see ``EMBEDDED_WORKER``)."""
    global _embedded
    current = get_engine().settings
    if current.transport != "inline" or not current.embedded_worker:
        return None
    with _embedded_lock:
        if _embedded is None:
            from durable.worker.loop import WorkerLoop

            _embedded = WorkerLoop()
            threading.Thread(target=_embedded.run_forever, name="durable-embedded-worker", daemon=True).start()
            logging.getLogger("durable.worker").info("embedded durable worker started")
    return _embedded


def start_advertising(queues: list[str], namespaces: frozenset[str] | None = None) -> None:
    """Advertise this worker process in the fleet (queues, steps, workflows) until :func:`stop_advertising`.

    ``namespaces``: those it serves, when not its engine's scope (a Celery worker's, from its queues).
    """
    global _advertiser
    from durable.fleet import Advertiser

    engine = get_engine()
    _advertiser = Advertiser(
        engine.store,
        engine.owner,
        queues,
        engine.settings.fleet_ttl,
        registry=engine.registry,
        clock=engine.clock,
        capabilities=engine.capabilities,
        namespaces=namespaces if namespaces is not None else engine.namespaces,
    )
    _advertiser.start()


def stop_advertising() -> None:
    if _advertiser is not None:
        _advertiser.stop()
