"""A step that kills its own worker process (a poison step) on a real prefork Celery worker.

Each execution is logged before the step calls ``os._exit(1)``, which takes
the pool process down in the middle of the step; Celery's main process
starts a new one. The step's execution lease then lapses (the test writes it
into the past, as the lease window passing would), and the sweep counts the
lost attempt against the step's ``retries``. Deadlines are hang guards only.
"""

from __future__ import annotations

import pytest

import durable
from durable.models import Checkpoint, Run
from tests.integration.harness import lapse_run_leases, lapse_step_leases, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TERMINAL = ("completed", "failed", "cancelled", "dead")


@pytest.mark.parametrize(
    "eager",
    [
        pytest.param(False, id="dispatched", marks=pytest.mark.durable_settings(EAGER_STEPS=False)),
        pytest.param(True, id="eager", marks=pytest.mark.durable_settings(EAGER_STEPS=True)),
    ],
)
def test_a_step_that_kills_its_worker_is_attempted_retries_plus_one_times(cluster, eager):
    """``retries=2``: exactly three executions, then ``worker_lost`` in the workflow's ``except StepFailed``.

    Eager, attempt 1 runs inside the turn (the turn dies with it); the retries go through the broker.
    """
    worker = cluster.spawn_worker("P", ["durable", "alpha"], pool="prefork", concurrency=1)
    cluster.wait_ready(worker)
    sweeper = cluster.sweeper()
    run = durable.start("it.guarded", {}, run_id=f"poison-{'eager' if eager else 'dispatched'}")

    def executions() -> list[int]:
        return [e["attempt"] for e in cluster.executions(run, name="alpha.poison")]

    def held(attempt: int) -> bool:
        cp = Checkpoint.objects.filter(run_id=run, seq=1, status="running", attempts=attempt)
        return len(executions()) >= attempt and cp.exists()

    for attempt in (1, 2, 3):
        wait_until(lambda a=attempt: held(a), f"attempt {attempt} to start", diagnostics=cluster.diagnostics)
        # Its pool process is gone with the claim: the execution lease lapses.
        assert lapse_step_leases([run], "running", seq=1) == 1
        if eager and attempt == 1:
            # Attempt 1 ran inside the turn (eager): that turn's lease lapses with it.
            assert lapse_run_leases([run]) == 1

    def over_or_again() -> bool:
        status = Run.objects.filter(id=run).values_list("status", flat=True).first()
        return status in TERMINAL or len(executions()) > 3

    wait_until(over_or_again, "the run to end (or a 4th execution)", diagnostics=cluster.diagnostics)
    assert executions() == [1, 2, 3]
    wait_until(
        lambda: Run.objects.filter(id=run, status="completed").exists(),
        "the run to complete",
        diagnostics=cluster.diagnostics,
    )
    assert Run.objects.get(id=run).output == {"caught": "worker_lost", "attempts": 3}
    cp = Checkpoint.objects.get(run_id=run, seq=1)
    assert (cp.status, cp.attempts, cp.error["code"]) == ("failed", 3, "worker_lost")
    assert len({e["pid"] for e in cluster.executions(run, name="alpha.poison")}) == 3  # three pool processes died
    assert sweeper.counts["steps_recovered"] == 3
    assert worker.alive()
