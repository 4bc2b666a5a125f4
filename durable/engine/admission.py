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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from durable.engine.plan_queues import QueueAdmitted, plan_queue_admission

if TYPE_CHECKING:
    from durable.engine.core import Engine

logger = logging.getLogger("durable")


def limited(engine: Engine, queue: str | None) -> bool:
    """Is ``queue`` a limited queue (its steps wait for admission)?"""
    return queue is not None and queue in engine.settings.queues


def admit(engine: Engine, queue: str) -> QueueAdmitted:
    """Admit what ``queue`` allows now and dispatch the grants (each at its granted start)."""
    now = engine.clock.now()
    settings = engine.settings
    plan = plan_queue_admission(queue, now, settings.queues[queue], settings.step_execution_lease, settings.sweep_batch)
    admitted = engine.store.admit_steps(plan)
    for grant in admitted.grants:
        delay = max((grant.start - now).total_seconds(), 0.0)
        engine.transport.dispatch_step(grant.run_id, grant.seq, queue, delay=delay)
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
            admit(engine, queue)
        except Exception:
            logger.warning("could not admit the next steps of queue %r; the sweep will", queue, exc_info=True)


def admit_due(engine: Engine) -> int:
    """The sweep: admit what every limited queue allows now. Returns the steps granted."""
    granted = 0
    for queue in engine.settings.queues:
        granted += len(admit(engine, queue).grants)
    return granted
