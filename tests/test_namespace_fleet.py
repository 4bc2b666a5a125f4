"""Two real ``durable_worker`` processes scoped ``--namespace a`` and ``--namespace b``.

PostgreSQL, real processes. Each step and each run's final turn record the pid
of the process that ran them: every run of namespace ``a`` ran entirely in
the ``a`` worker and every run of ``b`` in the ``b`` worker (exact counts).
Runs of namespace ``c``, started first (the oldest pending runs, so an
unscoped claimer would take them before any other), stay pending with no
turn and no step while both workers complete everything else; a worker
started ``--namespace c`` then runs them.
"""

from __future__ import annotations

import subprocess

import pytest

import durable
from durable.models import Checkpoint, Run, WorkerDescriptor
from tests import namespace_workflows as _registered  # noqa: F401
from tests.processes import spawn_worker, stop, until

RUNS = 8

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _spawn(tmp, tag: str, *extra: str) -> subprocess.Popen[bytes]:
    return spawn_worker(tmp, tag, "tests.namespace_settings", *extra)


def _pids(ids: list[str]) -> list[int]:
    outputs = [Run.objects.get(id=i).output for i in ids]
    return [pid for output in outputs for pid in (output["first"], output["second"], output["turn"])]


@pytest.mark.timeout(300)
def test_each_scoped_worker_runs_only_its_namespace_and_an_unserved_namespace_waits(tmp_path):
    waiting = [durable.start("nsfleet.flow", n, namespace="c") for n in range(RUNS)]
    worker_a = _spawn(tmp_path, "a", "--namespace", "a")
    worker_b = _spawn(tmp_path, "b", "--namespace", "b")
    worker_c = None
    try:
        until(lambda: WorkerDescriptor.objects.count() == 2, "both workers advertised")
        scopes = sorted(tuple(d.capabilities["namespaces"]) for d in WorkerDescriptor.objects.all())
        assert scopes == [("a",), ("b",)]
        in_a = [durable.start("nsfleet.flow", n, namespace="a") for n in range(RUNS)]
        in_b = [durable.start("nsfleet.flow", n, namespace="b") for n in range(RUNS)]
        done = in_a + in_b
        until(lambda: Run.objects.filter(id__in=done, status="completed").count() == 2 * RUNS, "a and b completed")
        assert _pids(in_a) == [worker_a.pid] * (3 * RUNS)
        assert _pids(in_b) == [worker_b.pid] * (3 * RUNS)
        steps = Checkpoint.objects.filter(run_id__in=done, kind="step")
        assert steps.count() == 4 * RUNS and set(steps.values_list("attempts", flat=True)) == {1}

        # Namespace c has no worker: its runs were never touched, though they were due first.
        untouched = Run.objects.filter(id__in=waiting, status="pending", turns=0, locked_by__isnull=True)
        assert untouched.count() == RUNS
        assert not Checkpoint.objects.filter(run_id__in=waiting).exists()

        worker_c = _spawn(tmp_path, "c", "--namespace", "c")
        until(lambda: Run.objects.filter(id__in=waiting, status="completed").count() == RUNS, "c completed")
        assert _pids(waiting) == [worker_c.pid] * (3 * RUNS)
    finally:
        for proc in (worker_a, worker_b, worker_c):
            if proc is not None and proc.poll() is None:
                stop(proc)


def test_a_bad_namespace_is_refused_with_a_message(tmp_path):
    proc = _spawn(tmp_path, "bad", "--namespace", "a,,b", "--once")
    assert proc.wait(timeout=120) != 0
    text = (tmp_path / "bad.out").read_text()
    assert "--namespace: namespace '' is invalid" in text and "Traceback" not in text
