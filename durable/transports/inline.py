"""In-process transport: turns and steps run on a pool of threads of this process.

The embedded default. Delayed work (a timer due in a few seconds, a retry) is
kept on a small in-memory schedule; anything further out, and anything lost
when the process stops, is picked up by the worker loop from the database.
In a process that runs a worker loop itself (``durable_worker``, the
embedded worker), a delayed turn is left to that loop instead, nudged to
look again by its due time: the loop claims due runs by the page and
commits their turns together, where timed turns would each take a lease,
read a history and commit on their own.

In a process scoped to namespaces (``durable_worker --namespace``) it runs only
their runs' turns and steps: work it announces for another namespace (a run
its workflow signalled or started, a waiter its run woke) is left in the
database, where that namespace's worker takes it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections

from durable.engine.ports import RunRecord, Transport
from durable.engine.requirements import serves
from durable.transports.namespaces import RunNamespaces

if TYPE_CHECKING:
    from durable.engine.core import Engine

logger = logging.getLogger("durable.inline")

# Delays longer than this are left to the worker loop's timer sweep.
MAX_SCHEDULED_DELAY = 60.0


class InlineTransport(Transport):
    def __init__(self, get_engine: Callable[[], Engine], threads: int) -> None:
        self._get_engine = get_engine
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="durable")
        self._heap: list[tuple[float, int, Callable[[], Any]]] = []
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._timer: threading.Thread | None = None
        self._closed = False
        self._loop_nudge: Callable[[float], None] | None = None
        self._namespaces = RunNamespaces(get_engine)

    def attach_loop(self, nudge: Callable[[float], None] | None) -> None:
        """Leave delayed turns to this process's worker loop; ``nudge(delay)`` wakes it in time.

        ``None`` detaches it (the loop stopped): delayed turns are timed here again.
        """
        self._loop_nudge = nudge

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        if not self._serves(run_id, namespace):
            return  # another namespace's run: its worker's due sweep takes it from the table
        nudge = self._loop_nudge
        if delay > 0 and nudge is not None:
            nudge(delay)  # the run's wake_at is stored: the loop's sweep takes it when due
            return
        self._submit(lambda: self._get_engine().run_turn(run_id), delay)

    def takes_leased_runs(self) -> bool:
        return True

    def run_leased(self, run: RunRecord) -> None:
        """Run the first turn of a run this process inserted already leased (see ``durable.start``)."""
        self._submit(lambda: self._get_engine().run_turn(run.id, acquired=run, fresh=True), 0.0)

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> bool:
        if not serves(self._get_engine().capabilities, queue) or not self._serves(run_id, namespace):
            return False  # a capability this process lacks, or another namespace's: its worker takes it from the table
        return self._submit(lambda: self._get_engine().execute_step(run_id, seq), delay) and delay <= 0

    def _serves(self, run_id: str, namespace: str | None) -> bool:
        """Whether this process runs ``run_id``'s work (scoped: only its namespaces'; the row is read if needed)."""
        scoped = self._get_engine().namespaces
        if scoped is None:
            return True
        found = self._namespaces.of(run_id, namespace)
        return found is not None and found in scoped

    def _submit(self, job: Callable[[], Any], delay: float) -> bool:
        """Queue ``job`` (after ``delay``); whether it was queued here (else the worker loop finds the work)."""
        if self._closed:
            return False
        if delay <= 0:
            try:
                self._pool.submit(self._run, job)
            except RuntimeError:
                # The interpreter is exiting (a management command ends): the work is in the
                # database and the next worker loop picks it up.
                logger.debug("in-process pool closed; leaving the job to the worker loop")
                return False
            return True
        if delay > MAX_SCHEDULED_DELAY:
            return False
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._ids), job))
            if self._timer is None:
                self._timer = threading.Thread(target=self._schedule_loop, name="durable-timer", daemon=True)
                self._timer.start()
            self._cond.notify()
        return True

    @staticmethod
    def _run(job: Callable[[], Any]) -> None:
        try:
            job()
        except Exception:
            logger.exception("in-process durable job failed; the sweeps will retry it")
        finally:
            close_old_connections()

    def _schedule_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                _, _, job = heapq.heappop(self._heap)
            self._pool.submit(self._run, job)

    def shutdown(self, wait: bool = False) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._pool.shutdown(wait=wait)
