"""Low-latency pickup on PostgreSQL: ``LISTEN`` for the notifications new work sends.

A process on the ``manual`` transport (a web process next to ``durable_worker``)
sends ``pg_notify`` in the commit of a start, a signal or a step result that
wakes a run (:mod:`durable.store.postgres.base`); the payload is the run's
namespace. :class:`Listener` holds a psycopg connection of its own (never one
of Django's: it stays idle in ``LISTEN`` for the life of the worker) and, on a
notification for a namespace the worker serves, ends the loop's idle wait, so
the run is claimed within milliseconds instead of at the next poll.

Guarantees: notifications are only a doorbell. One that is lost (the
connection dropped, the worker restarted) costs at most one poll interval,
as before; after a reconnect the loop is woken once, since notifications sent
while it was away are gone. Many notifications in a burst end one idle wait:
the loop then claims what is due by the page, so they coalesce into one poll.
A notification for a namespace the worker does not serve is ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

from durable.store.statements import NOTIFY_CHANNEL

logger = logging.getLogger("durable.worker")

# Longest the listening thread goes without looking at its stop event.
_STOP_CHECK = 0.5
# Longest :meth:`Listener.stop` waits for the thread (one stuck connecting to an unreachable server).
_STOP_JOIN = 10.0


def wanted(payload: str, namespaces: frozenset[str] | None) -> bool:
    """Whether a notification (its payload: a namespace, or empty) concerns a worker serving ``namespaces``.

    An unscoped worker (None) takes every one; an empty payload concerns every worker.
    """
    return namespaces is None or not payload or payload in namespaces


def available() -> bool:
    """Can this process listen: is the default database PostgreSQL on psycopg 3?"""
    if connection.vendor != "postgresql":
        return False
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


class Listener:
    """A daemon thread that listens on :data:`~durable.store.statements.NOTIFY_CHANNEL` and calls ``wake()``.

    ``wake`` must be cheap and thread-safe (the worker loop's nudge). ``retry``:
    seconds between attempts to reconnect after the connection fails.
    ``listening`` is set while a ``LISTEN`` is in place (tests wait on it).
    """

    def __init__(self, wake: Callable[[], None], namespaces: frozenset[str] | None, retry: float) -> None:
        self._wake = wake
        self._namespaces = namespaces
        self._retry = retry
        self._stop = threading.Event()
        self.listening = threading.Event()
        self._params: dict[str, Any] = connection.get_connection_params()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start listening, in a daemon thread (``listening`` is set once the ``LISTEN`` is in place)."""
        self._thread = threading.Thread(target=self._run, name="durable-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening; returns once the thread has closed its connection (or, stuck connecting, after a while).

        The thread is a daemon: one still waiting for the server does not keep the process alive.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_STOP_JOIN)
            self._thread = None

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                self._listen(woken_on_start=not first)
            except Exception:
                logger.warning(
                    "listening for notifications failed; polling only, reconnecting in %.0fs",
                    self._retry,
                    exc_info=True,
                )
            finally:
                self.listening.clear()
            first = False
            self._stop.wait(self._retry)

    def _listen(self, *, woken_on_start: bool) -> None:
        """One connection's life: ``LISTEN``, then wake the loop on each notification it cares about."""
        import psycopg

        with psycopg.Connection.connect(**{**self._params, "autocommit": True}) as conn:
            conn.execute(f'LISTEN "{NOTIFY_CHANNEL}"')
            self.listening.set()
            logger.info("listening for notifications on %s", NOTIFY_CHANNEL)
            if woken_on_start:
                self._wake()  # what was notified while the connection was down is lost: look once
            while not self._stop.is_set():
                for note in conn.notifies(timeout=_STOP_CHECK):
                    if wanted(note.payload, self._namespaces):
                        self._wake()
