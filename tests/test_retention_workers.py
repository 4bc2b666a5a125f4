"""Two ``durable_worker`` processes prune the same backlog: every expired run archived and deleted once.

Real processes on PostgreSQL (the point is the race between sweepers on the
claims): 400 runs finished 40 days ago with two checkpoints each, retention
batches of 50, the archive writing JSON lines per process. Kept: a completed
child whose parent is suspended, a completed run another suspended run waits
for, and a young run.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from durable.models import Checkpoint, Run, SignalWaiter
from tests.processes import logs as worker_logs
from tests.processes import spawn_worker, stop

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXPIRED = 400


def _fixture(now: datetime) -> None:
    old, later = now - timedelta(days=40), now + timedelta(days=1)
    runs = [
        Run(id=f"old-{i:03d}", workflow="w", status="completed", created_at=old, finished_at=old + timedelta(seconds=i))
        for i in range(EXPIRED)
    ]
    runs += [
        Run(id="parent", workflow="w", status="suspended", wake_at=later),
        Run(id="parent.child.1", workflow="w", status="completed", parent_id="parent", finished_at=old),
        Run(id="watcher", workflow="w", status="suspended", wake_at=later),
        Run(id="target", workflow="w", status="completed", finished_at=old),
        Run(id="young", workflow="w", status="completed", finished_at=now - timedelta(days=1)),
    ]
    Run.objects.bulk_create(runs)
    cps = [Checkpoint(run_id=r.id, seq=s, name="s", kind="local", status="completed") for r in runs for s in (1, 2)]
    Checkpoint.objects.bulk_create(cps)
    SignalWaiter.objects.create(run_id="watcher", name="__run__:target", seq=1)


@pytest.mark.timeout(240)
def test_two_workers_prune_a_backlog_once_each_and_keep_what_active_runs_need(tmp_path):
    _fixture(datetime.now(UTC))
    tags = [f"worker{i}" for i in range(2)]
    archive = {"RETENTION_ARCHIVE_DIR": str(tmp_path)}
    workers = [spawn_worker(tmp_path, tag, "tests.retention_settings", env=archive) for tag in tags]
    try:
        deadline = time.monotonic() + 120
        while Run.objects.filter(id__startswith="old-").exists() and time.monotonic() < deadline:
            for proc in workers:
                assert proc.poll() is None, "a worker died"
            time.sleep(0.25)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)  # all at once: they drain in parallel
        for proc in workers:
            stop(proc)
    logs = worker_logs(tmp_path, tags)
    assert not Run.objects.filter(id__startswith="old-").exists(), logs
    assert Checkpoint.objects.count() == 10  # the kept runs' two each, nothing orphaned
    kept = sorted(Run.objects.values_list("id", flat=True))
    assert kept == ["parent", "parent.child.1", "target", "watcher", "young"], logs
    archived = [json.loads(line)["run"]["id"] for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    # Claims are disjoint: every run archived by exactly one process, exactly once.
    assert sorted(archived) == sorted(f"old-{i:03d}" for i in range(EXPIRED)), logs
