"""Infrastructure outages in the middle of runs: Redis and PostgreSQL restarted.

Redis (the doorbell) keeps nothing here, so a restart loses every message and
connection; PostgreSQL (the truth) going away makes every in-flight database
call fail. Either way every run must still complete, with one checkpoint per
position, and no step that had completed may run again.

The PostgreSQL test restarts the server the test database lives on; it runs
last in this module and waits until the server accepts connections again. The
restart command is ``pg_ctlcluster --skip-systemctl-redirect <version> main restart``
unless ``$DURABLE_IT_PG_RESTART`` gives another (e.g. for a private cluster).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

import durable
from durable.models import Checkpoint, Run
from tests.integration.harness import (
    SETTLE,
    account,
    assert_executions_match_attempts,
    assert_pipeline_history,
    lapse_run_leases,
    lapse_step_leases,
    lapse_when_stalled,
    wait_until,
)
from tests.integration.workflows import expected_pipeline

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ALL_QUEUES = ["durable", "alpha", "beta", "durable.sweeps"]
RUNS = 8


def start_runs(prefix: str, n: int, sleep: float, gate: Path) -> list[str]:
    """``n`` pipelines whose last step waits for ``gate``: none can finish before the test opens it."""
    opts = {k: {"sleep": sleep} for k in "123"}
    opts["3"]["gate"] = str(gate)
    return [durable.start("it.pipeline", {"x": x, "opts": opts}, run_id=f"{prefix}-{x}") for x in range(n)]


def progress(runs: list[str]) -> list[tuple[str, int, str, int]]:
    """Where the runs' steps stand: a change means work is moving."""
    return list(
        Checkpoint.objects.filter(run_id__in=runs)
        .order_by("run_id", "seq")
        .values_list("run_id", "seq", "status", "attempts")
    )


def completed_steps(runs: list[str]) -> set[tuple[str, int]]:
    return set(Checkpoint.objects.filter(run_id__in=runs, kind="step", status="completed").values_list("run_id", "seq"))


def wait_mid_flight(cluster, runs: list[str], steps: int) -> set[tuple[str, int]]:
    """Wait until ``steps`` steps completed while some runs are still far from done; return those steps."""

    def mid() -> set[tuple[str, int]] | None:
        done = completed_steps(runs)
        return done if len(done) >= steps else None

    done = wait_until(mid, f"{steps} steps to complete", diagnostics=cluster.diagnostics)
    assert len(done) < 3 * len(runs) - 4, "the runs finished before the outage"  # (their last step is gated)
    return done


def assert_all_completed_once(cluster, runs: list[str], completed_before: set[tuple[str, int]]) -> None:
    acc = account(cluster, runs)
    assert acc.completed() == len(runs), acc.status
    for run in runs:
        assert acc.output[run] == expected_pipeline(int(run.rsplit("-", 1)[1]))
        assert_pipeline_history(acc, run)
        assert_executions_match_attempts(acc, run)
    for run, seq in completed_before:
        assert acc.executions[(run, seq)] == [1], f"{run} #{seq} completed before the outage and ran again"


def wait_all_completed(cluster, runs: list[str], lapse: Callable[[], int]) -> None:
    """Wait for every run to complete; whenever they stall, make the leases they may wait on lapse."""
    unstick = lapse_when_stalled(lapse, lambda: progress(runs))

    def completed() -> bool:
        if Run.objects.filter(id__in=runs, status="completed").count() == len(runs):
            return True
        unstick()
        return False

    wait_until(completed, f"all {len(runs)} runs to complete", timeout=SETTLE, diagnostics=cluster.diagnostics)


# A stalled dispatch is lapsed again at each stall: more re-dispatches than a quiet run needs.
@pytest.mark.durable_settings(STEP_REDISPATCH_MAX=50)
def test_redis_restarted_mid_runs_every_run_completes_after_the_sweeps(cluster, tmp_path):
    """Every key of our Redis database is dropped and every connection to it killed, mid-flight.

    Sweeps come from a real ``celery beat`` (through Redis, to a worker): lost
    step messages are re-dispatched by the lost-dispatch self-heal, lost turns
    by the wake sweep. No step runs twice: a step is only re-dispatched while
    still pending, and the claim lets one delivery run it. The dispatch leases
    of lost messages lapse when the runs stall (the test makes them lapse; the
    workers' leases outlast any test); only dispatch leases: re-dispatching a
    pending step can never run it twice.
    """
    gate = tmp_path / "gate"
    workers = cluster.workers(("A", ALL_QUEUES), ("B", ALL_QUEUES))
    beat = cluster.beat()
    runs = start_runs("redis", RUNS, sleep=0.4, gate=gate)
    before = wait_mid_flight(cluster, runs, steps=6)

    killed = cluster.redis_restart()
    assert killed >= 2, "expected to drop the workers' broker connections"
    lapse_step_leases(runs, "pending")  # the messages of steps waiting to be claimed are gone
    gate.touch()

    wait_all_completed(cluster, runs, lambda: lapse_step_leases(runs, "pending"))
    assert_all_completed_once(cluster, runs, before)
    acc = account(cluster, runs)
    for run in runs:
        assert acc.step_attempts(run) == {1: 1, 3: 1, 4: 1}, f"{run}: a step ran twice"
        assert acc.resumes[run] == 1
    assert beat.alive() and all(w.alive() for w in workers)
    assert cluster.task_log_lines("durable.sweep"), "beat's sweeps never reached a worker"


def test_database_error_in_the_fleet_check_gives_the_turn_back_instead_of_failing_the_run(cluster):
    """A database error while a turn asks "does a live worker serve this step?" is ours, not the workflow's.

    The worker's first fleet-check query raises ``OperationalError`` (injected,
    as a statement timeout would; the connection stays usable). The turn must
    be given back and retried, as for any other failed read of the engine's own,
    never fail the run as if the workflow code had raised.
    """
    worker = cluster.spawn_worker("A", ALL_QUEUES, env={"DURABLE_IT_FAULT": "fleet_check_once"})
    cluster.wait_ready(worker)
    cluster.sweeper()
    run = durable.start("it.pipeline", {"x": 1}, run_id="fleet-db-error")
    wait_until(
        lambda: Run.objects.get(id=run).status in ("completed", "failed"),
        "the run to end",
        diagnostics=cluster.diagnostics,
    )
    error = Run.objects.get(id=run).error or {}
    assert Run.objects.get(id=run).status == "completed", f"the run failed on an engine database error: {error}"
    acc = account(cluster, [run])
    assert acc.output[run] == expected_pipeline(1)
    assert {seq: acc.executions[(run, seq)] for seq in (1, 3, 4)} == {1: [1], 3: [1], 4: [1]}


def _postgres_commands() -> tuple[list[str], list[str]]:
    custom = os.environ.get("DURABLE_IT_PG_RESTART")
    if custom:
        return shlex.split(custom), shlex.split(os.environ.get("DURABLE_IT_PG_START", custom))
    versions = sorted(p.name for p in Path("/etc/postgresql").iterdir()) if Path("/etc/postgresql").exists() else []
    if len(versions) != 1:
        pytest.fail("cannot tell which PostgreSQL cluster to restart: set DURABLE_IT_PG_RESTART")
    base = ["pg_ctlcluster", "--skip-systemctl-redirect", versions[0], "main"]
    return [*base, "restart"], [*base, "start"]


def _pg_ready() -> bool:
    db = settings.DATABASES["default"]
    cmd = ["pg_isready", "-q", "-h", str(db.get("HOST") or "127.0.0.1"), "-p", str(db.get("PORT") or 5432)]
    return subprocess.run(cmd, check=False).returncode == 0


def _wait_pg_ready(timeout: float) -> None:
    wait_until(_pg_ready, "PostgreSQL to accept connections again", timeout=timeout, interval=0.2)


def test_postgres_restarted_mid_runs_every_run_completes(cluster, tmp_path):
    """PostgreSQL restarts while steps and turns are in flight on two workers.

    Whatever was cut off is re-driven from the tables once the server is back:
    expired turn leases by the orphan sweep, steps whose result could not be
    recorded by the step-lease sweep (they run again: at-least-once, every
    execution a counted attempt), lost step messages by the self-heal. Steps
    that completed before the restart never run again. What was cut off is
    only known afterwards: whenever the runs stall, the test makes every lease
    they may wait on lapse (turns', running steps', dispatches'), as the lease
    windows passing would.
    """
    restart, start = _postgres_commands()
    gate = tmp_path / "gate"
    cluster.workers(("A", ALL_QUEUES), ("B", ALL_QUEUES))
    cluster.sweeper()  # stands in for beat; reconnects after the restart
    runs = start_runs("pg", 6, sleep=0.4, gate=gate)
    before = wait_mid_flight(cluster, runs, steps=5)
    try:
        # Output to a file, not a pipe: a server started by the command may keep it open.
        with open(cluster.tmp / "pg-restart.log", "wb") as out:
            done = subprocess.run(restart, check=False, stdout=out, stderr=subprocess.STDOUT, timeout=60)
        assert done.returncode == 0, f"{restart} failed:\n{(cluster.tmp / 'pg-restart.log').read_text()}"
        _wait_pg_ready(SETTLE)
    finally:
        if not _pg_ready():
            with open(cluster.tmp / "pg-start.log", "wb") as out:
                subprocess.run(start, check=False, stdout=out, stderr=subprocess.STDOUT, timeout=60)
            _wait_pg_ready(SETTLE)
        connections.close_all()  # this thread's connection died with the server
    gate.touch()

    def lapse_all() -> int:
        return sum((lapse_run_leases(runs), lapse_step_leases(runs, "running"), lapse_step_leases(runs, "pending")))

    wait_all_completed(cluster, runs, lapse_all)
    assert_all_completed_once(cluster, runs, before)
    assert not Run.objects.filter(id__in=runs, status="dead").exists()
