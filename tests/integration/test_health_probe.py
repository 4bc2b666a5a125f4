"""``manage.py durable_health`` as a container probe runs it: a real process, against real workers.

The only worker of queue ``beta`` is killed with SIGKILL while a step waits on
that queue: the probe, healthy before, exits non-zero once the dead worker's
advertisement has expired (``FLEET_TTL``), naming the queue.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import durable
from durable.models import Checkpoint
from tests.integration.harness import REPO, SETTLE, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def probe(cluster) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "manage.py", "durable_health"],
        cwd=REPO,
        env=cluster.env(),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    return done.returncode, json.loads(done.stdout)


def beta_steps(status: str) -> int:
    return Checkpoint.objects.filter(name="beta.double", status=status).count()


@pytest.mark.durable_settings(FLEET_TTL="2s")
def test_the_probe_fails_when_the_only_worker_of_a_queue_with_pending_steps_is_killed(cluster, tmp_path):
    turns = cluster.spawn_worker("turns", ["durable", "alpha"])
    beta = cluster.spawn_worker("beta", ["beta"], concurrency=1)
    cluster.wait_ready(turns, beta)
    gate = str(tmp_path / "never")
    # The first run's beta step holds the beta worker; the second one's waits in the queue.
    for n in range(2):
        durable.start("it.pipeline", {"x": n, "opts": {"2": {"gate": gate}}}, run_id=f"probe-{n}")
    wait_until(lambda: beta_steps("running") == 1 and beta_steps("pending") >= 1, "a beta step running, one waiting")
    status, body = probe(cluster)
    assert status == 0, body
    assert body["queues"]["beta"]["live_workers"] == 1 and body["queues"]["beta"]["pending_steps"] >= 1
    assert body["broker"] == {"ok": True, "error": None}
    beta.kill9()

    def failing() -> dict | None:
        status, body = probe(cluster)
        return body if status == 1 else None

    body = wait_until(failing, "the probe to report the dead worker's queue", timeout=SETTLE)
    assert body["queues_without_workers"] == ["beta"]
    assert "queue 'beta' has pending steps and no live worker" in body["problems"]
    assert body["queues"]["durable"]["live_workers"] == 1 and turns.alive()
