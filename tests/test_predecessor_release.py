"""A ``durable_worker`` killed with SIGKILL and started again takes its work back at once.

The workers' leases are an hour long, so nothing but the restarted worker
ending its dead predecessor's leases (``durable.worker.predecessors``) can
explain the work going on before the test's hang guard. The deadlines below
only stop a stuck test; no assertion depends on how fast anything was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.utils import timezone

import durable
from durable.engine import owners
from durable.models import Checkpoint, Run, RunStatus
from tests import fault_workflows as fw
from tests.test_faults import PROCESS_SETTLE, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parent.parent
HOUR_LEASES = {"LEASE": "1h", "STEP_EXECUTION_LEASE": "1h", "STEP_LEASE": "1h"}


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start ``manage.py durable_worker`` (hour-long leases) on the test database; kill leftovers."""
    started: list[tuple[subprocess.Popen[bytes], Any]] = []
    db = settings.DATABASES["default"]
    auth = quote(db["USER"] or "postgres") + (":" + quote(db["PASSWORD"]) if db.get("PASSWORD") else "")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.fault_settings",
        "DATABASE_URL": f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "DURABLE_FAULT_OPTIONS": json.dumps(HOUR_LEASES),
        "PYTHONUNBUFFERED": "1",
    }

    def spawn(tag: str) -> subprocess.Popen[bytes]:
        out = (tmp_path / f"{tag}.out").open("wb")
        cmd = [sys.executable, "manage.py", "durable_worker", "--interval", "0.05"]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        started.append((proc, out))
        return proc

    yield spawn
    for proc, out in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        out.close()


def output(tmp_path: Path, tag: str) -> str:
    return (tmp_path / f"{tag}.out").read_text(errors="replace")


def wait_completed(run_id: str, diagnostics: Callable[[], str]) -> None:
    wait_for(
        lambda: Run.objects.get(id=run_id).status == RunStatus.COMPLETED,
        f"run {run_id} to complete",
        timeout=PROCESS_SETTLE,
        diagnostics=diagnostics,
    )


def kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_restarted_worker_resumes_a_turn_its_killed_predecessor_held(tmp_path, worker):
    """SIGKILL inside local step B: the run stays ``running`` under the dead worker's hour-long lease."""
    log, release = tmp_path / "exec.log", tmp_path / "release"
    run_id = durable.start(fw.three_locals, {"log": str(log), "release": str(release)}, run_id="killed-turn")
    first = worker("first")
    wait_for(lambda: fw.executions(log, "B") == 1, "step B to start", timeout=PROCESS_SETTLE)
    kill9(first)
    held = Run.objects.get(id=run_id)
    assert held.status == RunStatus.RUNNING
    assert held.locked_by.startswith(f"{owners.host()}:{first.pid}:")
    assert owners.is_dead(held.locked_by)
    release.touch()

    worker("second")
    wait_completed(run_id, lambda: output(tmp_path, "second"))
    assert timezone.now() < held.locked_until  # the dead worker's lease had not lapsed: it was released
    run = Run.objects.get(id=run_id)
    assert (run.output, run.recovery_attempts) == (["A", "B", "C"], 1)
    assert (fw.executions(log, "A"), fw.executions(log, "B"), fw.executions(log, "C")) == (1, 2, 1)
    assert f"released the leases of dead process {held.locked_by} of this host: 1 run(s), 0 step(s)" in output(
        tmp_path, "second"
    )


def test_restarted_worker_resumes_a_step_its_killed_predecessor_was_running(tmp_path, worker):
    """SIGKILL inside a dispatched step: its execution lease (an hour) names the dead worker."""
    log, release = tmp_path / "exec.log", tmp_path / "release"
    inp = {"log": str(log), "release": str(release)}
    run_id = durable.start(fw.blocking_remote_then_local, inp, run_id="killed-step")
    first = worker("first")
    wait_for(lambda: fw.executions(log, "blocking_remote") == 1, "the step to start", timeout=PROCESS_SETTLE)
    kill9(first)
    step = Checkpoint.objects.get(run_id=run_id, seq=1)
    assert (step.status, step.attempts) == ("running", 1)
    assert step.locked_by.startswith(f"{owners.host()}:{first.pid}:")
    release.touch()

    worker("second")
    wait_completed(run_id, lambda: output(tmp_path, "second"))
    assert timezone.now() < step.wake_at  # the step's execution lease had not lapsed: it was released
    assert Run.objects.get(id=run_id).output == "released"
    assert (fw.executions(log, "blocking_remote"), fw.executions(log, "after")) == (2, 1)
    assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "completed"
    assert f"released the leases of dead process {step.locked_by} of this host: 0 run(s), 1 step(s)" in output(
        tmp_path, "second"
    )


def test_a_live_workers_leases_are_never_released(tmp_path, worker):
    """A second worker starting beside a live one that holds a step leaves that step alone."""
    log, release = tmp_path / "exec.log", tmp_path / "release"
    run_id = durable.start(fw.blocking_remote_then_local, {"log": str(log), "release": str(release)}, run_id="live")
    worker("first")
    wait_for(lambda: fw.executions(log, "blocking_remote") == 1, "the step to start", timeout=PROCESS_SETTLE)
    holder = Checkpoint.objects.get(run_id=run_id, seq=1).locked_by
    second = worker("second")
    wait_for(lambda: "running" in output(tmp_path, "second"), "the second worker to start", timeout=PROCESS_SETTLE)
    assert not owners.is_dead(holder)
    release.touch()
    wait_completed(run_id, lambda: output(tmp_path, "first"))
    assert fw.executions(log, "blocking_remote") == 1
    assert "released the leases" not in output(tmp_path, "second")
    assert second.poll() is None
