"""A Celery worker killed with SIGKILL and started again under the same name takes its work back at once.

The leases are an hour long, and no beat runs: only the restarted worker's
start-up hook (ending its dead predecessor's leases, then sending a sweep to
the sweep queue) can explain the run completing before the hang guard.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

import durable
from durable.engine import owners
from durable.models import Run
from tests.integration.harness import wait_until
from tests.integration.workflows import expected_pipeline

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUEUES = ("durable", "alpha", "beta", "durable.sweeps")


@pytest.mark.durable_settings(LEASE="1h", STEP_EXECUTION_LEASE="1h", STEP_LEASE="1h")
def test_restarted_celery_worker_resumes_the_turn_its_killed_predecessor_held(cluster, tmp_path):
    gate = tmp_path / "gate"
    (first,) = cluster.workers(("A", QUEUES))
    run_id = durable.start("it.pipeline", {"x": 3, "opts": {"1": {"gate": str(gate)}}})
    wait_until(lambda: cluster.executions(run_id), "step 1 to start", diagnostics=cluster.diagnostics)
    first.kill9()
    held = Run.objects.get(id=run_id)
    assert held.status == "running" and owners.is_dead(held.locked_by)
    gate.touch()

    (second,) = cluster.workers(("A", QUEUES))
    wait_until(
        lambda: Run.objects.filter(id=run_id, status="completed").exists(),
        "the restarted worker to finish the run",
        diagnostics=cluster.diagnostics,
    )
    assert timezone.now() < held.locked_until  # the dead worker's lease had not lapsed: it was released
    run = Run.objects.get(id=run_id)
    assert (run.output, run.recovery_attempts) == (expected_pipeline(3), 1)
    assert [e["attempt"] for e in cluster.executions(run_id, seq=1)] == [1, 2]
    assert "released the leases of dead process" in second.output()
