"""Two real ``durable_worker`` processes, one with ``--capability gpu``: only it runs the gpu steps.

PostgreSQL, real processes. Each step returns the pid of the process that ran
it; every run's gpu step must have run once, in the capable worker, while the
plain steps may run in either. With the capable worker stopped (its fleet
advertisement retired) and the other one restarted (so no answer it cached
while the capable worker lived is used), a new run is parked ``blocked`` with
a reason that names the capability, and the step never runs.
"""

from __future__ import annotations

import pytest

import durable
from durable.models import Checkpoint, Run, WorkerDescriptor
from tests import requirement_workflows as _registered  # noqa: F401
from tests.processes import spawn_worker, stop, until

RUNS = 12
SETTINGS = "tests.requirement_settings"

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(300)
def test_only_the_worker_with_the_capability_runs_the_steps_that_require_it(tmp_path):
    gpu = spawn_worker(tmp_path, "gpu", SETTINGS, "--capability", "gpu")
    plain = spawn_worker(tmp_path, "plain", SETTINGS)
    try:
        until(lambda: WorkerDescriptor.objects.count() == 2, "both workers advertised")
        ids = [durable.start("reqfleet.flow", n) for n in range(RUNS)]
        until(lambda: Run.objects.filter(id__in=ids, status="completed").count() == RUNS, "every run completed")
        outputs = [Run.objects.get(id=i).output for i in ids]
        assert {o["render"] for o in outputs} == {gpu.pid}
        assert {o["plain"] for o in outputs} <= {gpu.pid, plain.pid}
        steps = Checkpoint.objects.filter(run_id__in=ids, kind="step")
        assert set(steps.values_list("name", "attempts")) == {("reqfleet.plain", 1), ("reqfleet.render", 1)}
        assert steps.count() == 2 * RUNS

        stop(gpu)
        stop(plain)  # a fresh process: no cached answer from when the gpu worker was alive
        plain = spawn_worker(tmp_path, "plain-again", SETTINGS)
        until(lambda: WorkerDescriptor.objects.count() == 1, "only the plain worker advertised")
        blocked = durable.start("reqfleet.flow", 99)
        until(lambda: Run.objects.get(id=blocked).status == "blocked", "the run parked blocked")
        run = Run.objects.get(id=blocked)
        assert run.error["requires"] == ["gpu"] and "capability gpu" in run.error["message"]
        assert not Checkpoint.objects.filter(run_id=blocked, name="reqfleet.render").exists()
    finally:
        for proc in (gpu, plain):
            stop(proc)
