"""A Django task survives the kill -9 of the worker that runs it (PostgreSQL, real durable_worker processes)."""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path

import pytest

from durable.models import Checkpoint
from tests import task_examples as ex
from tests.test_faults import PROCESS_SETTLE, spawn_worker, wait_for  # noqa: F401  (fixture)

try:
    from django.tasks import TaskResultStatus
except ImportError:
    from django_tasks import TaskResultStatus  # type: ignore[no-redef]

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_task_whose_worker_is_killed_completes_on_the_next_worker(tmp_path: Path, spawn_worker) -> None:  # noqa: F811
    log, release = tmp_path / "executions", tmp_path / "release"
    result = ex.blocking.enqueue(str(log), str(release))
    first = spawn_worker("first")
    wait_for(
        lambda: _lines(log) == 1,
        "the task to start on the first worker",
        timeout=PROCESS_SETTLE,
        diagnostics=first.output,
    )
    assert ex.blocking.get_result(result.id).status == TaskResultStatus.RUNNING

    first.proc.send_signal(signal.SIGKILL)
    assert first.proc.wait(timeout=10) == -signal.SIGKILL
    step = Checkpoint.objects.get(run_id=result.id, kind="step")
    assert (step.status, step.attempts) == ("running", 1)
    # As if the dead worker's execution lease had run out: nobody renews it any more.
    Checkpoint.objects.filter(pk=step.pk).update(wake_at=step.started_at - timedelta(seconds=1))
    release.touch()

    second = spawn_worker("second")
    wait_for(
        lambda: ex.blocking.get_result(result.id).is_finished,
        "the task to finish on the second worker",
        timeout=PROCESS_SETTLE,
        diagnostics=second.output,
    )
    done = ex.blocking.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL, done.errors
    assert done.return_value == "released"
    assert _lines(log) == 2  # at least once: the killed execution, then the one that finished
    assert done.attempts == 2
    # The killed attempt failed (its worker was lost) and used the task's one retry.
    assert [e.exception_class_path for e in done.errors] == ["builtins.WorkerLost"]
    steps = Checkpoint.objects.filter(run_id=result.id, kind="step").order_by("seq")
    assert list(steps.values_list("status", "attempts")) == [("failed", 1), ("completed", 1)]
