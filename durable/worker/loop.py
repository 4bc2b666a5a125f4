"""The worker loop: polls the database for due work and runs it.

Used by ``manage.py durable_worker`` (deployments without Celery) and, in the
embedded default, by a daemon thread of the web process. Any number of loops
may run against one database: every claim is compare-and-set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from django.db import close_old_connections, connection

from durable.runtime import get_engine
from durable.worker import listen
from durable.worker.due import wake_due_runs
from durable.worker.listen import Listener
from durable.worker.predecessors import release_dead_holders
from durable.worker.tick import tick

logger = logging.getLogger("durable.worker")

# Longest an idle loop goes without looking at its stop event.
_STOP_CHECK = 0.1
# Longest the loop waits for its listener's connection before its first tick.
_LISTEN_WAIT = 10.0
# Longest between attempts to listen again after the listener's connection failed.
_LISTEN_RETRY = 5.0


class WorkerLoop:
    """Run :func:`durable.worker.tick` until ``stop`` is set.

    The due-run sweep claims a page of runs at once and the loop runs their
    turns on ``WORKER_THREADS`` threads of its own (on PostgreSQL). It ticks
    again at once while there was work; when idle it waits ``WORKER_INTERVAL``,
    or less if a sleeping run wakes sooner, so a timer is swept when due.

    ``stop`` is checked between items, so a stop request (SIGTERM) lets the
    items in progress finish and commit (a graceful drain); claimed runs whose
    turn had not started are handed back.

    On start, :meth:`run_forever` first ends the leases of this host's dead
    processes (a killed predecessor's; see
    :func:`~durable.worker.predecessors.release_dead_holders`), so its first
    tick recovers their work instead of waiting for the leases to lapse.

    With ``listen`` (``durable_worker``) on PostgreSQL and ``DURABLE["NOTIFY"]``,
    a :class:`~durable.worker.listen.Listener` ends the idle wait when new
    work is notified; it is listening before the first tick (or gave up
    waiting for its connection), so work committed after that tick is
    notified and work committed before it is found by it.
    """

    def __init__(
        self, *, interval: float | None = None, stop: threading.Event | None = None, listen: bool = False
    ) -> None:
        self.interval = interval
        self.stop = stop or threading.Event()
        self.listen = listen
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._nudged = threading.Event()
        # A notification of new work arrived: the next pass claims due runs before the other sweeps.
        self._notified = threading.Event()
        self._idle_until = float("inf")  # monotonic end of the current idle wait (inf: not idle)

    def nudge(self, delay: float) -> None:
        """Something in this process falls due in ``delay`` seconds: end an idle wait that would
        last longer, so the loop looks again (and waits until then at most)."""
        if time.monotonic() + delay < self._idle_until:
            self._nudged.set()

    def run_once(self, *, threaded: bool = False) -> dict[str, int]:
        """One pass of every sweep.

        ``threaded`` (the long-running loop) runs the turns of the due runs a
        sweep claimed on ``WORKER_THREADS`` threads of this loop; otherwise
        they run one after another in the calling thread.
        """
        try:
            # Inside a transaction (a test's) other threads would not see its rows.
            runner = self._run_claimed if threaded and not connection.in_atomic_block else None
            return tick(get_engine(), execute=True, should_stop=self.stop.is_set, runner=runner)
        finally:
            # Inside a test's transaction the connection must stay as it is.
            if not connection.in_atomic_block:
                close_old_connections()

    def pick_up(self) -> dict[str, int]:
        """After a notification: claim and run due runs at once, ahead of the other sweeps.

        The loop follows it with a full pass at once, so a stream of
        notifications never keeps the other sweeps (timers, recovery) waiting.
        """
        self._notified.clear()
        try:
            runner = self._run_claimed if not connection.in_atomic_block else None
            engine = get_engine()
            return {"turns": wake_due_runs(engine, execute=True, should_stop=self.stop.is_set, runner=runner)}
        finally:
            if not connection.in_atomic_block:
                close_old_connections()

    def notified(self) -> None:
        """New work was notified (the listener's thread): end the idle wait and pick it up first."""
        self._notified.set()
        self.nudge(0.0)

    def _run_claimed(self, jobs: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run the turns of claimed runs on ``WORKER_THREADS`` threads; wait for all of them."""
        engine = get_engine()
        size = engine.settings.worker_threads
        # A store that takes one writer at a time (SQLite): turns in parallel would only wait on its lock.
        if size == 1 or len(jobs) == 1 or not engine.store.parallel_writes():
            return [job() for job in jobs]
        if self._pool is None or self._pool_size != size:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="durable-sweep")
            self._pool_size = size
        lock = threading.Lock()
        started = 0

        def run(job: Callable[[], Any]) -> Any:
            nonlocal started
            with lock:
                started += 1
            try:
                return job()
            finally:
                # A thread's last job of the page: between pages, as the loop does between
                # ticks, drop its connection if broken or past CONN_MAX_AGE (not after every turn).
                if started == len(jobs):
                    close_old_connections()

        return list(self._pool.map(run, jobs))

    def release_predecessors(self) -> dict[str, int]:
        """End the leases of this host's dead processes; never raises (a failure only means waiting for them)."""
        try:
            return release_dead_holders(get_engine())
        except Exception:
            logger.warning("could not release the leases of this host's dead processes", exc_info=True)
            return {}
        finally:
            if not connection.in_atomic_block:
                close_old_connections()

    def run_forever(self) -> None:
        self.release_predecessors()
        transport = get_engine().transport
        transport.attach_loop(self.nudge)
        listener = self._start_listener()
        try:
            while not self.stop.is_set():
                try:
                    if self._notified.is_set():
                        self.pick_up()  # then the full pass, at once: no sweep waits behind notifications
                    counts = self.run_once(threaded=True)
                except Exception:
                    logger.exception("worker tick failed; retrying")
                    self._sleep(self.interval or get_engine().settings.worker_interval)
                    continue
                if not any(counts.values()):
                    self._idle()
        finally:
            transport.attach_loop(None)
            if listener is not None:
                listener.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        transport.shutdown(wait=True)

    def _start_listener(self) -> Listener | None:
        """The notification listener, once listening (None: not asked for, off, or not PostgreSQL)."""
        engine = get_engine()
        if not (self.listen and engine.settings.notify and listen.available()):
            return None
        interval = self.interval or engine.settings.worker_interval
        listener = Listener(self.notified, engine.namespaces, retry=min(interval, _LISTEN_RETRY))
        listener.start()
        # Bounded: a database that refuses the connection leaves the loop to its polls.
        if not listener.listening.wait(_LISTEN_WAIT):
            logger.warning("not listening for notifications yet; polling every %.1fs meanwhile", interval)
        return listener

    def _sleep(self, seconds: float, ending: str = "poll") -> None:
        """Wait ``seconds``, less if stopped or nudged; ``ending``: what a wait that runs out is (logged)."""
        self._idle_until = time.monotonic() + seconds
        try:
            # ``stop`` is the caller's event (a signal handler sets it): look at it often.
            while not self.stop.is_set():
                left = self._idle_until - time.monotonic()
                if left <= 0:
                    logger.debug("idle wait ended: %s", ending)
                    break
                if self._nudged.wait(min(left, _STOP_CHECK)):
                    logger.debug("idle wait ended: nudged")
                    break
        finally:
            self._idle_until = float("inf")
            self._nudged.clear()

    def _idle(self) -> None:
        """Wait as an idle loop does: one that runs out after a full interval is a poll, a shorter one a due wake."""
        wait = self._idle_wait()
        self._sleep(wait, "poll" if wait >= (self.interval or get_engine().settings.worker_interval) else "due")

    def _idle_wait(self) -> float:
        """Seconds to wait when idle: the poll interval, or less if a sleeping run wakes sooner.

        So a timer is swept at its due time, not up to one interval after it.
        """
        engine = get_engine()
        interval = self.interval or engine.settings.worker_interval
        try:
            due = engine.store.next_wake()
        except Exception:
            logger.warning("could not read the next wake time", exc_info=True)
            return interval
        finally:
            if not connection.in_atomic_block:
                close_old_connections()
        if not isinstance(due, datetime):
            return interval
        return min(max((due - engine.clock.now()).total_seconds(), 0.0), interval)


def start_embedded() -> WorkerLoop | None:
    """Start the worker loop in a daemon thread of this process, once.

    Does nothing unless the transport is ``inline`` and
    ``DURABLE["EMBEDDED_WORKER"]`` is true. The loop is held by
    :mod:`durable.runtime` (process-wide state lives there).
    """
    from durable import runtime

    return runtime.start_embedded_worker()
