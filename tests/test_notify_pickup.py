"""A real ``durable_worker`` picks up work notified from this process, without polling for it.

PostgreSQL, real processes. The worker polls every hour (``--interval 3600``),
so a run it completes within the test's bounded wait was not found by a poll;
its log (DEBUG) names why each idle wait ended, and no wait ended by timing
out. The test process is on the manual transport: it runs nothing itself.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import durable
from durable.models import Run
from tests import notify_workflows as _registered  # noqa: F401
from tests.processes import logs, spawn_worker, stop, until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

POLL_ENDED = "idle wait ended: poll"


def _spawn(tmp: Path, tag: str, *extra: str) -> subprocess.Popen[bytes]:
    return spawn_worker(
        tmp, tag, "tests.notify_settings", "--interval", "3600", *extra, env={"DURABLE_LOG_LEVEL": "DEBUG"}
    )


def _log(tmp: Path, tag: str) -> str:
    return (tmp / f"{tag}.out").read_text(errors="replace")


def _completed(run_id: str) -> bool:
    return Run.objects.filter(pk=run_id, status="completed").exists()


@pytest.mark.timeout(300)
def test_a_run_started_here_is_taken_by_a_listening_worker_without_a_poll(tmp_path):
    worker = _spawn(tmp_path, "w")
    try:
        until(lambda: "listening for notifications" in _log(tmp_path, "w"), "the worker listening")
        first = durable.start("notify.flow", 1)
        until(lambda: _completed(first), f"the first run completed\n{logs(tmp_path, ['w'])}")
        second = durable.start("notify.flow", 2)
        until(lambda: _completed(second), f"the second run completed\n{logs(tmp_path, ['w'])}")
        waiting = durable.start("notify.waits", 3)
        until(
            lambda: Run.objects.filter(pk=waiting, status="suspended").exists(),
            f"the run waiting for its signal\n{logs(tmp_path, ['w'])}",
        )
        durable.signal(waiting, "go", 4)
        until(lambda: _completed(waiting), f"the signalled run completed\n{logs(tmp_path, ['w'])}")
        outputs = [Run.objects.get(pk=i).output for i in (first, second, waiting)]
        assert outputs == [
            {"value": 2, "pid": worker.pid},
            {"value": 3, "pid": worker.pid},
            {"value": 7, "pid": worker.pid},
        ]
    finally:
        stop(worker)
    assert _log(tmp_path, "w").count(POLL_ENDED) == 0


@pytest.mark.timeout(300)
def test_a_scoped_worker_ignores_another_namespaces_notifications(tmp_path):
    worker = _spawn(tmp_path, "a", "--namespace", "a")
    try:
        until(lambda: "listening for notifications" in _log(tmp_path, "a"), "the worker listening")
        other = durable.start("notify.flow", 1, namespace="b")
        mine = durable.start("notify.flow", 2, namespace="a")
        until(lambda: _completed(mine), f"the run of namespace a completed\n{logs(tmp_path, ['a'])}")
        assert Run.objects.filter(pk=other, status="pending", turns=0, locked_by__isnull=True).exists()
    finally:
        stop(worker)
    assert _log(tmp_path, "a").count(POLL_ENDED) == 0
