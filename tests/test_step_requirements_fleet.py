"""Two real ``durable_worker`` processes, one with ``--capability gpu``: only it runs the gpu steps.

PostgreSQL, real processes. Each step returns the pid of the process that ran
it; every run's gpu step must have run once, in the capable worker, while the
plain steps may run in either. With the capable worker stopped (its fleet
advertisement retired) and the other one restarted (so no answer it cached
while the capable worker lived is used), a new run is parked ``blocked`` with
a reason that names the capability, and the step never runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings

import durable
from durable.models import Checkpoint, Run, WorkerDescriptor
from tests import requirement_workflows as _registered  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
RUNS = 12

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _database_url() -> str:
    db = settings.DATABASES["default"]
    auth = quote(db["USER"] or "postgres") + (":" + quote(db["PASSWORD"]) if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _spawn(tmp: Path, tag: str, *extra: str, module: str = "tests.requirement_settings") -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": module, "DATABASE_URL": _database_url()}
    with (tmp / f"{tag}.out").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "durable_worker", "--interval", "0.5", *extra],
            cwd=REPO,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _until(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout  # a bound on waiting for an event, not a measured threshold
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(300)
def test_only_the_worker_with_the_capability_runs_the_steps_that_require_it(tmp_path):
    gpu = _spawn(tmp_path, "gpu", "--capability", "gpu")
    plain = _spawn(tmp_path, "plain")
    try:
        _until(lambda: WorkerDescriptor.objects.count() == 2, "both workers advertised")
        ids = [durable.start("reqfleet.flow", n) for n in range(RUNS)]
        _until(lambda: Run.objects.filter(id__in=ids, status="completed").count() == RUNS, "every run completed")
        outputs = [Run.objects.get(id=i).output for i in ids]
        assert {o["render"] for o in outputs} == {gpu.pid}
        assert {o["plain"] for o in outputs} <= {gpu.pid, plain.pid}
        steps = Checkpoint.objects.filter(run_id__in=ids, kind="step")
        assert set(steps.values_list("name", "attempts")) == {("reqfleet.plain", 1), ("reqfleet.render", 1)}
        assert steps.count() == 2 * RUNS

        _stop(gpu)
        _stop(plain)  # a fresh process: no cached answer from when the gpu worker was alive
        plain = _spawn(tmp_path, "plain-again")
        _until(lambda: WorkerDescriptor.objects.count() == 1, "only the plain worker advertised")
        blocked = durable.start("reqfleet.flow", 99)
        _until(lambda: Run.objects.get(id=blocked).status == "blocked", "the run parked blocked")
        run = Run.objects.get(id=blocked)
        assert run.error["requires"] == ["gpu"] and "capability gpu" in run.error["message"]
        assert not Checkpoint.objects.filter(run_id=blocked, name="reqfleet.render").exists()
    finally:
        for proc in (gpu, plain):
            if proc.poll() is None:
                _stop(proc)
