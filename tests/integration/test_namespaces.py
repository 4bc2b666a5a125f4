"""Namespace queues on real processes: two Celery workers scoped to namespaces ``a`` and ``b``.

``NAMESPACE_QUEUES`` is on (in the test process and the workers): a run of
namespace ``a`` sends its turns to ``durable.ns.a`` and its steps to
``tenant.ns.a``. Worker ``a`` consumes only a's queues, plus the sweep queue
that real ``celery beat`` feeds (so beat-driven sweeps run on a scoped worker);
worker ``b`` only b's. Every step execution is logged with its namespace and
pid, every run's output names the process of its final turn: each worker ran
exactly its namespace's work. Runs of ``c``, started first, stay pending with
no turn while a and b complete and the sweeps run, then complete once a
worker consuming c's queues starts.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.utils import timezone

import durable
from durable.models import Checkpoint, Run, WorkerDescriptor
from durable.observability.tenancy import namespaces as namespace_states
from durable.runtime import get_engine
from tests.integration.harness import Cluster, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
RUNS = 6
SWEEPS = "durable.sweeps"


def _queues(namespace: str) -> tuple[str, str]:
    return (f"durable.ns.{namespace}", f"tenant.ns.{namespace}")


def _start(namespace: str) -> list[str]:
    return [durable.start("it.tenant", n, namespace=namespace) for n in range(RUNS)]


def _completed(ids: list[str]) -> bool:
    return Run.objects.filter(id__in=ids, status="completed").count() == len(ids)


def _pids(ids: list[str]) -> list[int]:
    outputs = [Run.objects.get(id=i).output for i in ids]
    return [pid for output in outputs for pid in (output["first"], output["second"], output["turn"])]


@pytest.mark.timeout(400)
@pytest.mark.durable_settings(NAMESPACE_QUEUES=True, EAGER_STEPS=False, SWEEP_INTERVAL="500ms")
def test_each_celery_worker_runs_only_its_namespace_and_an_unserved_namespace_waits(cluster: Cluster) -> None:
    waiting = _start("c")  # the oldest due runs: an unscoped sweep or worker would take them first
    worker_a = cluster.spawn_worker("a", (*_queues("a"), SWEEPS))
    worker_b = cluster.spawn_worker("b", _queues("b"))
    cluster.wait_ready(worker_a, worker_b)
    cluster.beat()
    scopes = sorted(tuple(d.capabilities["namespaces"]) for d in WorkerDescriptor.objects.all())
    assert scopes == [("a",), ("b",)]
    in_a, in_b = _start("a"), _start("b")
    wait_until(lambda: _completed(in_a + in_b), "the runs of a and b to complete", diagnostics=cluster.diagnostics)
    assert _pids(in_a) == [worker_a.pid] * (3 * RUNS)
    assert _pids(in_b) == [worker_b.pid] * (3 * RUNS)
    logged = Counter((e["ns"], e["pid"]) for e in cluster.executions(kind="tenant"))
    assert logged == {("a", worker_a.pid): 2 * RUNS, ("b", worker_b.pid): 2 * RUNS}

    # Beat's sweeps ran on worker a meanwhile (they announce c's due runs on c's queue, never run them).
    wait_until(lambda: "Task durable.sweep[" in worker_a.output(), "a beat sweep to run on worker a")
    untouched = Run.objects.filter(id__in=waiting, status="pending", turns=0, locked_by__isnull=True)
    assert untouched.count() == RUNS
    assert not Checkpoint.objects.filter(run_id__in=waiting).exists()
    assert cluster.queue_length("durable.ns.c") >= RUNS
    states = namespace_states(get_engine(), timezone.now())
    assert (states["c"].pending_runs, states["c"].live_workers) == (RUNS, 0)
    assert states["c"].unserved and states["a"].live_workers == 1

    worker_c = cluster.spawn_worker("c", _queues("c"))
    cluster.wait_ready(worker_c)
    wait_until(lambda: _completed(waiting), "the runs of c to complete", diagnostics=cluster.diagnostics)
    assert _pids(waiting) == [worker_c.pid] * (3 * RUNS)
    logged = Counter((e["ns"], e["pid"]) for e in cluster.executions(kind="tenant"))
    assert logged[("c", worker_c.pid)] == 2 * RUNS and sum(logged.values()) == 6 * RUNS
