"""In one process, results of a limited queue leave their slots while enough granted steps wait on its threads.

When admission queued granted steps on this process's own threads (the
in-process transport), each of them ends in a result here that asks for the
next admission. A result that finds at least a quarter of the concurrency
still queued here neither reads the queue nor grants
(:func:`durable.engine.admission.after_result`); the one that finds fewer
grants every free slot. This holds on every database (no read is needed).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

import durable
from durable.engine.ports import Transport
from durable.engine.vocab import Admission
from durable.models import Checkpoint, Queue
from durable.runtime import get_engine
from tests.test_hot_path import _statements

QUEUES = {"q_here": {"concurrency": 8}}
QUEUE_TABLE = Queue._meta.db_table


@durable.step(queue="q_here")
def qh_work(i: int) -> int:
    return i


@durable.workflow(name="qh_fan")
def qh_fan(ctx: Any, n: int) -> Any:
    return ctx.gather(*(durable.call(qh_work, i) for i in range(n)))


class QueuedHere(Transport):
    """Says every undelayed step was queued on this process's threads (as the in-process pool does); runs nothing."""

    def __init__(self, queued: bool) -> None:
        self.queued = queued
        self.steps: list[int] = []

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        return None

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> bool:
        self.steps.append(seq)
        return self.queued and delay <= 0


def _results_one_by_one(queued: bool) -> tuple[list[tuple[int, int]], str]:
    with override_settings(DURABLE={"TRANSPORT": "manual", "LEASE": 30, "QUEUES": QUEUES}):
        engine = get_engine()
        transport = QueuedHere(queued)
        engine.transport = transport
        run_id = durable.start(qh_fan, 12)
        engine.run_turn(run_id)  # writes 12 waiting steps; its admission grants 8
        assert len(transport.steps) == 8
        after: list[tuple[int, int]] = []
        done = 0
        while done < len(transport.steps):
            seq = transport.steps[done]
            with _statements() as statements:
                engine.execute_step(run_id, seq)  # as the pool thread runs the queued step
            granted = Checkpoint.objects.filter(run_id=run_id, queue="q_here", admission=Admission.ADMITTED)
            # Every admission (a read riding the result, a peek, a grant) touches the queue's row.
            after.append((granted.count(), sum(QUEUE_TABLE in sql for sql, _ in statements)))
            done += 1
        engine.run_turn(run_id)
    info = durable.get_run(run_id)
    attempts = Checkpoint.objects.filter(run_id=run_id, queue="q_here").values_list("attempts", flat=True)
    assert sorted(attempts) == [1] * 12  # every step ran once
    return after, str(info.status)


@pytest.mark.django_db
def test_results_leave_their_slots_while_a_quarter_of_the_concurrency_waits_on_this_processs_threads() -> None:
    after, status = _results_one_by_one(queued=True)
    assert status == "completed"
    # 8 granted and queued here (threshold 2). Results 1-6 leave 7... 2 queued: they neither read
    # the queue nor grant. The 7th finds 1: it admits the 4 still waiting, now queued here too; the
    # 8th-10th find 4, 3, 2 and leave their slots; the 11th and 12th find fewer and admit (nothing).
    assert [admitted for admitted, _ in after] == [8] * 6 + [12] * 6
    reads = [n > 0 for _, n in after]
    assert reads == [False] * 6 + [True] + [False] * 3 + [True] * 2


@pytest.mark.django_db
def test_steps_queued_elsewhere_leave_admission_to_the_database() -> None:
    after, status = _results_one_by_one(queued=False)
    assert status == "completed"
    # Nothing waits on this process's threads: every result reads its queue. On PostgreSQL that read
    # rides the result and leaves slots while granted steps wait unstarted (test_queue_batches);
    # elsewhere each result admits the next waiting step at once.
    assert all(n > 0 for _, n in after)
    batched = connection.vendor == "postgresql"
    expected = [8] * 6 + [12] * 6 if batched else [9, 10, 11] + [12] * 9
    assert [admitted for admitted, _ in after] == expected
