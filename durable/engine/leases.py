"""Background lease renewal for turns and steps held by this process.

One daemon thread per process renews every lease it is asked to keep, at a
third of the lease window. A renewal that reports the lease gone calls the
holder's ``on_lost`` so the turn or step stops writing. Renewal never raises:
a failed renewal (database blip) is retried at the next beat, and the lease
window is three beats long.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("durable.leases")


@dataclass
class _Held:
    interval: float
    renew: Callable[[], bool]
    on_lost: Callable[[], None]
    due: float


class Hold:
    def __init__(self, keeper: LeaseKeeper, key: int) -> None:
        self._keeper = keeper
        self._key = key

    def release(self) -> None:
        self._keeper._drop(self._key)


class LeaseKeeper:
    def __init__(self, close_connection: Callable[[], None] | None = None) -> None:
        self._held: dict[int, _Held] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._thread: threading.Thread | None = None
        self._close_connection = close_connection
        self._sleeping_until = float("-inf")  # when the keeper next looks (inf: not until woken)

    def hold(self, interval: float, renew: Callable[[], bool], on_lost: Callable[[], None]) -> Hold:
        key = next(self._ids)
        due = time.monotonic() + interval
        with self._lock:
            self._held[key] = _Held(interval, renew, on_lost, due)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="durable-lease-keeper", daemon=True)
                self._thread.start()
            # Wake the keeper only if it sleeps past the new hold's first renewal (holds
            # mostly share one interval, so a new one is rarely the soonest).
            wake = due < self._sleeping_until
        if wake:
            self._changed.set()
        return Hold(self, key)

    def _drop(self, key: int) -> None:
        with self._lock:
            self._held.pop(key, None)

    def _loop(self) -> None:
        # The thread stays when nothing is held: a turn or a step takes a hold every few
        # milliseconds under load, and starting a thread each time costs more than the wait.
        while True:
            with self._lock:
                soonest = min((h.due for h in self._held.values()), default=float("inf"))
                self._sleeping_until = soonest
                self._changed.clear()
            delay = soonest - time.monotonic()
            if delay > 0:
                self._changed.wait(None if soonest == float("inf") else delay)
                continue
            now = time.monotonic()
            with self._lock:
                due = [(k, h) for k, h in self._held.items() if h.due <= now]
            for key, held in due:
                held.due = now + held.interval
                try:
                    ok = held.renew()
                except Exception:
                    logger.warning("lease renewal failed; retrying at the next beat", exc_info=True)
                    continue
                if not ok:
                    self._drop(key)
                    try:
                        held.on_lost()
                    except Exception:
                        logger.exception("lease-lost callback failed")
            if self._close_connection is not None:
                self._close_connection()
