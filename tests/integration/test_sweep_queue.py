"""Celery beat's sweeps on their own queue: a backlog of work does not hold recovery back.

Real ``celery beat``, real workers and Redis. One worker serves the work
queues with a single thread, held by a step that waits on a gate, and a
backlog of turns queues up behind it; a second, small worker consumes only
the sweep queue. A run orphaned meanwhile (its turn's lease lapsed) must be
taken over by a sweep while the gate is still shut and the backlog still
queued: before the sweeps had their own queue, beat's sweep waited in the
``durable`` queue behind that backlog and the orphan waited with it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import durable
from durable.models import Run
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BACKLOG = 6
SWEEPS = "durable.sweeps"


def test_sweeps_recover_an_orphan_while_a_backlog_blocks_the_work_queue(cluster, tmp_path):
    gate = tmp_path / "gate"
    work = cluster.spawn_worker("work", ("durable", "alpha", "beta"), concurrency=1)
    sweeper = cluster.spawn_worker("sweeper", (SWEEPS,), concurrency=1)
    cluster.wait_ready(work, sweeper)
    blocker = durable.start("it.pipeline", {"x": 1, "opts": {"1": {"gate": str(gate)}}})
    wait_until(
        lambda: cluster.executions(blocker),
        "the blocking step to start on the work worker",
        diagnostics=cluster.diagnostics,
    )
    backlog = [durable.start("it.pipeline", {"x": i}) for i in range(BACKLOG)]
    wait_until(lambda: cluster.queue_length("durable") >= BACKLOG, "the backlog to queue up")
    orphan = backlog[-1]
    # As a turn whose worker died would leave it: running, under a lease that has lapsed.
    Run.objects.filter(id=orphan).update(
        status="running", locked_by="gone:1:dead", locked_until=timezone.now() - timedelta(seconds=1)
    )
    cluster.beat()

    wait_until(
        lambda: Run.objects.filter(id=orphan, recovery_attempts__gte=1).exists(),
        "a sweep to take the orphan over",
        diagnostics=cluster.diagnostics,
    )
    # The sweep ran while the work queue was still blocked: the gated step has not finished
    # and the runs queued behind it are still queued.
    assert not cluster.executions(blocker, kind="step_done")
    assert cluster.queue_length("durable") >= BACKLOG - 1
    assert set(Run.objects.filter(id__in=backlog[:-1]).values_list("status", flat=True)) == {"pending"}
    # Celery logs a sweep that did something once it returns (its other lines are DEBUG: an
    # idle beat writes no INFO line), so the line of the sweep that took the orphan follows it.
    wait_until(lambda: "Task durable.sweep[" in sweeper.output(), "the sweep worker to log the sweep it ran")
    assert "Task durable.sweep[" not in work.output(), "a sweep went to the work queue"

    gate.touch()
    runs = [blocker, *backlog]
    wait_until(
        lambda: set(Run.objects.filter(id__in=runs).values_list("status", flat=True)) == {"completed"},
        "every run to complete once the gate opens",
        diagnostics=cluster.diagnostics,
    )
