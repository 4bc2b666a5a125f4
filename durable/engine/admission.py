"""Admission of steps of limited queues (``DURABLE["QUEUES"]``): who asks, and what follows a grant.

The store decides and writes (:meth:`Store.admit` executing an
:class:`~durable.engine.plan_queues.QueueAdmissionPlan` under the queue row's
lock); this module only says when to ask and dispatches what was granted,
after the admission committed. It is asked

* after the commit that writes a waiting step (the step may be admitted at once);
* after every write that frees a slot (a result, a retry, a lapsed lease, a
  cancel): the freeing process admits the next step itself, so a waiting step
  does not wait for a poll;
* by the sweep (:func:`admit_due`), for what no write announces: a rate's
  next start, a due retry, a resumed queue or a raised limit, a lapsed
  admission, a lost trigger.

A queue not named in ``DURABLE["QUEUES"]`` is never looked at: its steps cost
no statement here.

Within one engine, the passes of a queue asked for by writes run one at a
time (:class:`Admitters`): a write that frees a slot while another thread of
this process admits that queue does not wait for the queue row's lock; it
leaves a request the running pass serves with one more pass after its own.
So a busy queue is admitted in batches, by one thread per process, and the
other threads go on running steps.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from durable.engine.plan_queues import (
    AdmissionRead,
    QueueAdmissionPlan,
    QueueAdmitted,
    leave_threshold,
    plan_queue_admission,
)

if TYPE_CHECKING:
    from durable.engine.core import Engine

logger = logging.getLogger("durable")


class Admitters:
    """At most one write-triggered admission pass per queue at a time in this engine.

    :meth:`run` either runs the pass itself or, when a pass of that queue is
    already running in another thread, records a request and returns at once.
    The running pass then runs again before it stops, so every request is
    served by a pass that *starts after it* (hence after the requesting
    write's commit, whose freed slot or waiting step that pass sees). Nothing
    is lost if this process dies: the slot is free in the database and the
    sweep admits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._again: dict[str, bool] = {}  # queues with a pass running -> asked again meanwhile
        # Queues whose last result read here left its slot: the next result reads only the count.
        self._busy_reads: set[str] = set()

    def reads_busy(self, queue: str) -> bool:
        """Did the last result of ``queue`` read here leave its slot (so the next may read the count only)?"""
        return queue in self._busy_reads

    def read_left(self, queue: str, left: bool) -> None:
        """Note whether a result of ``queue`` left its slot (a hint only: any answer is safe)."""
        if left:
            self._busy_reads.add(queue)
        else:
            self._busy_reads.discard(queue)

    def busy(self, queue: str) -> bool:
        """Is a pass of ``queue`` running here now (a request would only be left to it)?"""
        with self._lock:
            return queue in self._again

    def run(self, queue: str, admit_once: Callable[[], object], first: Callable[[], object] | None = None) -> None:
        """Run ``first`` (default ``admit_once``), then ``admit_once`` while asked again; or leave a request."""
        with self._lock:
            if queue in self._again:
                self._again[queue] = True
                return
            self._again[queue] = False
        try:
            (first or admit_once)()
            while True:
                with self._lock:
                    if not self._again[queue]:
                        return
                    self._again[queue] = False
                admit_once()
        finally:
            with self._lock:
                self._again.pop(queue, None)


def limited(engine: Engine, queue: str | None) -> bool:
    """Is ``queue`` a limited queue (its steps wait for admission)?"""
    return queue is not None and queue in engine.settings.queues


def _plan(engine: Engine, queue: str) -> QueueAdmissionPlan:
    settings = engine.settings
    return plan_queue_admission(
        queue, engine.clock.now(), settings.queues[queue], settings.step_execution_lease, settings.sweep_batch
    )


def admit(engine: Engine, queue: str, read: AdmissionRead | None = None) -> QueueAdmitted:
    """Admit what ``queue`` allows now and dispatch the grants (each at its granted start).

    With ``read`` (filled by a step result's write), the grants are chosen
    from what that write read (earlier than now: it can only have counted a
    slot as held that is free now, or missed a step that became due since).
    """
    plan = _plan(engine, queue)
    now = plan.now
    admitted = engine.store.admit_steps(plan, read.seen if read is not None else None)
    concurrency = plan.defaults.concurrency
    if concurrency is not None and len(admitted.grants) >= leave_threshold(concurrency):
        engine.admitters.read_left(queue, True)  # this batch waits to start: the next results leave their slots
    here = engine.grants_here
    for grant in admitted.grants:
        delay = max((grant.start - now).total_seconds(), 0.0)
        if delay > 0:
            engine.transport.dispatch_step(grant.run_id, grant.seq, queue, delay=delay)
            continue
        here.add(queue, grant.run_id, grant.seq, grant.until)  # before it is queued: it may begin at once
        if not engine.transport.dispatch_step(grant.run_id, grant.seq, queue):
            here.begin(grant.run_id, grant.seq)  # not queued on this process's threads
    return admitted


def admit_next(engine: Engine, queues: Iterable[str | None]) -> None:
    """A write freed slots of ``queues``, or added waiting steps to them: admit their next steps now.

    Never raises: the slot is free in the database either way, and the
    sweep admits the next step if this attempt failed.
    """
    for queue in dict.fromkeys(queues):
        if queue is None or not limited(engine, queue):
            continue
        try:
            engine.admitters.run(queue, functools.partial(admit, engine, queue))
        except Exception:
            logger.warning("could not admit the next steps of queue %r; the sweep will", queue, exc_info=True)


def read_request(engine: Engine, queue: str | None) -> AdmissionRead | None:
    """What a step's result write of ``queue`` should read for the next admission (None: nothing).

    Nothing for a queue without limits, or while this process admits that
    queue already (the request will be left to that pass, which reads anew).
    """
    if queue is None or not limited(engine, queue) or engine.admitters.busy(queue) or _leave_here(engine, queue):
        return None
    return AdmissionRead(_plan(engine, queue), count_only=engine.admitters.reads_busy(queue))


def _leave_here(engine: Engine, queue: str) -> bool:
    """Do enough granted steps of ``queue`` wait to begin on this process's threads to leave a freed slot?

    The same rule as :meth:`~durable.engine.plan_queues.QueueSeen.leaves_slot`
    (a quarter of the concurrency), counted here without a read
    (:mod:`durable.engine.grants_here`): each of those steps ends in a result
    of this process that asks for the next admission after it, and the last
    of them finds fewer queued and admits every free slot. The settings'
    concurrency is the measure (a stored override only moves when batches
    are granted, never whether one is); never for a queue without one.
    """
    concurrency = engine.settings.queues[queue].concurrency
    if concurrency is None:
        return False
    return engine.grants_here.queued(queue, engine.clock.now()) >= leave_threshold(concurrency)


def after_result(engine: Engine, queue: str | None, read: AdmissionRead | None) -> None:
    """A step's result freed its slot of ``queue``: admit the next steps, from ``read`` when its write filled it.

    Grants chosen from what the result's statement read cost one statement,
    and a fresh read that found room and nothing waiting costs none
    (:meth:`~durable.engine.plan_queues.QueueSeen.nothing_waits`). The
    admission still reads under the lock when that read found the queue full
    or paused, when it is stale (a step may have been written waiting
    meanwhile), or when the store did not fill it. Never raises (see
    :func:`admit_next`).
    """
    if queue is None or not limited(engine, queue):
        return
    if (read is None or read.seen is None) and _leave_here(engine, queue):
        return  # no statement: a step queued here admits after its own result (_leave_here)
    if read is not None and read.seen is not None:
        if read.seen.nothing_waits(read.plan):
            engine.admitters.read_left(queue, False)
            return  # no statement: nothing waits that this slot could take (durable.store.queue_statements)
        left = read.seen.leaves_slot(read.plan)
        engine.admitters.read_left(queue, left)
        if left:
            return  # no statement: later results admit in a batch (QueueSeen.leaves_slot)
    if read is None or read.seen is None or not read.seen.candidates:
        admit_next(engine, [queue])
        return
    try:
        engine.admitters.run(
            queue, functools.partial(admit, engine, queue), functools.partial(admit, engine, queue, read)
        )
    except Exception:
        logger.warning("could not admit the next steps of queue %r; the sweep will", queue, exc_info=True)


def admit_due(engine: Engine) -> int:
    """The sweep: admit what every limited queue allows now. Returns the steps granted."""
    granted = 0
    for queue in engine.settings.queues:
        granted += len(admit(engine, queue).grants)
    return granted
