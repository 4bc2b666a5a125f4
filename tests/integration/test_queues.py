"""Limited step queues on real processes: two Celery workers, two ``durable_worker`` processes.

Every step execution writes its start and end into a table of the test
database (:mod:`tests.integration.queue_workflows`); the assertions are on
those rows (overlaps, order) and on the admission times the engine wrote
(``admitted_at``), never on how long something took.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connections
from django.test import override_settings
from django.utils import timezone

import durable
from durable.models import Checkpoint, Run
from tests.integration.common import SETTINGS_ENV, broker_url, durable_settings
from tests.integration.harness import Cluster, Proc, lapse_leases_of, lapse_step_leases, lapse_when_stalled, wait_until
from tests.integration.queue_workflows import QUEUE_NAMES, create_table, executions

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
WORKER_QUEUES = ("durable", *QUEUE_NAMES)


def max_overlap(rows: Iterable[dict[str, Any]]) -> int:
    """The most executions running at one instant (an execution without an end runs on)."""
    events = []
    for row in rows:
        events.append((row["started"], 1))
        if row["ended"] is not None:
            events.append((row["ended"], -1))
    running = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        running += delta
        peak = max(peak, running)
    return peak


def start_batches(queue: str, runs: int, n: int, **data: Any) -> list[str]:
    return [
        durable.start("iq.batch", {"queue": queue, "n": n, **data}, run_id=f"{queue}-{i}-{time.monotonic_ns()}")
        for i in range(runs)
    ]


def wait_completed(cluster: Cluster, run_ids: list[str], timeout: float = 120.0, hook: Any = None) -> None:
    def done() -> bool:
        if hook is not None:
            hook()
        statuses = set(Run.objects.filter(id__in=run_ids).values_list("status", flat=True))
        return statuses == {"completed"}

    wait_until(done, f"{len(run_ids)} runs to complete", timeout=timeout, diagnostics=cluster.diagnostics)


@pytest.fixture(autouse=True)
def _table(transactional_db: Any) -> Iterator[None]:
    create_table()
    yield
    connections.close_all()


QUEUES = {
    "iq_conc": {"concurrency": 3},
    "iq_key": {"key_concurrency": 1},
    "iq_rate": {"rate": "20/s"},
    "iq_fair": {"concurrency": 3},
    "iq_kill": {"concurrency": 2},
    "iq_flush": {"concurrency": 2},
    "iq_api": {"concurrency": 1},
}


def _assert_limits_held(conc: list[dict[str, Any]], keyed: list[dict[str, Any]]) -> None:
    assert len(conc) == 300 and all(row["ended"] is not None for row in conc)
    # Never more than 3 at once; and the limit is a limit, not a queue of one.
    assert 2 <= max_overlap(conc) <= 3
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in keyed:
        by_key[row["key"]].append(row)
    assert sorted(by_key) == ["k0", "k1", "k2", "k3"]
    assert {key: max_overlap(rows) for key, rows in by_key.items()} == dict.fromkeys(by_key, 1)
    assert max_overlap(keyed) > 1  # different keys do run at once


@pytest.mark.durable_settings(QUEUES=QUEUES)
@pytest.mark.timeout(300)
def test_celery_workers_never_run_more_than_the_concurrency_nor_two_of_one_key(cluster):
    """Two Celery workers with 4 threads each, no sweeper: every admission after the first is made by the
    write that freed a slot (a poll would never come), over 300 steps of a queue with concurrency 3."""
    cluster.workers(("A", WORKER_QUEUES), ("B", WORKER_QUEUES), concurrency=4)
    runs = start_batches("iq_conc", 30, 10, key=None, hold=0.005)
    runs += start_batches("iq_key", 12, 5, key="k", keys=4, hold=0.02)
    wait_completed(cluster, runs)
    conc, keyed = executions("iq_conc"), executions("iq_key")
    _assert_limits_held(conc, keyed)
    assert len({row["pid"] for row in conc}) == 2  # both workers took part
    assert not Checkpoint.objects.filter(run_id__in=runs).exclude(admission="admitted").exists()
    _assert_each_fan_out_woken_once(runs)


def _assert_each_fan_out_woken_once(runs: list[str]) -> None:
    """Two turns a run: the one that dispatched its gather, and the one its last result woke."""
    turns = list(Run.objects.filter(id__in=runs).values_list("turns", flat=True))
    assert (len(turns), set(turns)) == (len(runs), {2})


def _spawn_durable_worker(cluster: Cluster, name: str) -> Proc:
    extra = {"QUEUES": QUEUES, "TRANSPORT": "inline", "WORKER_THREADS": 4, "EMBEDDED_WORKER": False}
    return cluster._spawn(
        name,
        ["durable_worker", "--interval", "0.5"],
        ready=False,
        env={SETTINGS_ENV: json.dumps(extra)},
        module="django",
    )


@pytest.mark.durable_settings(QUEUES=QUEUES, TRANSPORT="manual", EMBEDDED_WORKER=False)
@pytest.mark.timeout(300)
def test_durable_workers_without_celery_never_run_more_than_the_concurrency_nor_two_of_one_key(cluster):
    """Two ``durable_worker`` processes (in-process transport, 4 threads each), no Celery anywhere."""
    workers = [_spawn_durable_worker(cluster, name) for name in ("W1", "W2")]
    runs = start_batches("iq_conc", 30, 10, key=None, hold=0.005)
    runs += start_batches("iq_key", 12, 5, key="k", keys=4, hold=0.02)
    wait_completed(cluster, runs)
    assert all(proc.alive() for proc in workers)
    conc, keyed = executions("iq_conc"), executions("iq_key")
    _assert_limits_held(conc, keyed)
    assert len({row["pid"] for row in conc + keyed}) == 2
    _assert_each_fan_out_woken_once(runs)


@pytest.mark.durable_settings(QUEUES=QUEUES)
@pytest.mark.timeout(300)
def test_a_hot_key_does_not_starve_cold_keys(cluster):
    """1,000 waiting steps of one hot key, then 9 cold keys with 10 each: every cold step finishes
    before the hot key's 100th (round robin across keys, concurrency 3)."""
    from durable.runtime import get_engine, now

    engine = get_engine()
    engine.store.configure_queue("iq_fair", now(), paused=True)  # everything waits until all are queued
    hot = start_batches("iq_fair", 100, 10, key="hot")
    cold = [run for i in range(9) for run in start_batches("iq_fair", 1, 10, key=f"cold{i}")]
    cluster.workers(("A", WORKER_QUEUES), ("B", WORKER_QUEUES), concurrency=4)
    waiting = Checkpoint.objects.filter(queue="iq_fair", admission="waiting")
    wait_until(lambda: waiting.count() == 1090, "1,090 steps waiting", diagnostics=cluster.diagnostics)
    engine.store.configure_queue("iq_fair", now(), paused=False)
    sweeper = cluster.sweeper()  # the resumed queue is admitted by the next sweep
    wait_completed(cluster, cold)
    sweeper.stop()
    rows = executions("iq_fair")
    hot_ends = sorted(row["ended"] for row in rows if row["key"] == "hot" and row["ended"] is not None)
    cold_ends = [row["ended"] for row in rows if row["key"] != "hot"]
    assert len(cold_ends) == 90
    assert len(hot_ends) < 100 or max(cold_ends) < hot_ends[99]
    assert max_overlap(rows) <= 3
    del hot


@pytest.mark.durable_settings(QUEUES=QUEUES)
@pytest.mark.timeout(300)
def test_a_worker_killed_holding_slots_shrinks_the_limit_only_until_their_lease_lapses(cluster, tmp_path):
    """Concurrency 2: worker A holds both slots with gated steps and is killed (kill -9).

    Its slots stay held (nothing else is admitted, sweep after sweep) until
    their leases lapse (the test moves them into the past); the next sweep
    then hands both slots out again, and worker B, started afterwards (so its
    start-up release of dead holders has nothing left to do), runs the rest.
    """
    gate = tmp_path / "gate"
    a = cluster.spawn_worker("A", WORKER_QUEUES, concurrency=4)
    cluster.wait_ready(a)
    runs = start_batches("iq_kill", 1, 6, key=None, hold=f"gate:{gate}")
    started = lambda: len(executions("iq_kill"))  # noqa: E731
    wait_until(lambda: started() == 2, "two gated steps to start on A", diagnostics=cluster.diagnostics)
    a.kill9()
    held = Checkpoint.objects.filter(queue="iq_kill", admission="admitted", status__in=["pending", "running"])
    sweeper = cluster.sweeper()
    sweeper.wait_ticks(3)
    assert started() == 2
    assert held.filter(status="running").count() == 2 and held.count() == 2  # the dead worker's, still held
    lapsed_at = timezone.now()
    assert lapse_leases_of(a) == 2  # its two steps (the run waits suspended: it holds no turn lease)
    wait_until(
        lambda: held.filter(admitted_at__gte=lapsed_at).count() == 2,
        "both slots admitted again once the leases lapsed",
        diagnostics=cluster.diagnostics,
    )
    gate.write_text("open")
    b = cluster.spawn_worker("B", WORKER_QUEUES, concurrency=4)
    cluster.wait_ready(b)
    wait_completed(cluster, runs)
    rows = executions("iq_kill")
    live = [row for row in rows if row["pid"] == b.pid]
    assert len(live) == 6  # the four never run and the two killed ones, retried (attempt 2)
    assert sorted(row["attempt"] for row in live) == [1, 1, 1, 1, 2, 2]
    assert max_overlap(live) <= 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test alone (FLUSHALL is never sent to a shared one)."""
    port = _free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        wait_until(lambda: _pings(client), "our redis-server to answer", timeout=30)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _use_broker(app: Any, url: str) -> None:
    """Publish to ``url`` from now on: pooled connections and producers keep the broker they were made for."""
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None


@pytest.mark.timeout(300)
def test_flushall_on_redis_loses_no_admitted_or_waiting_step(own_redis, tmp_path, transactional_db):
    from tests.integration.celery_app import app as celery_app

    extra = {"QUEUES": QUEUES}
    cluster = Cluster(tmp_path, own_redis, extra)
    _use_broker(celery_app, own_redis)
    celery_app.set_current()
    celery_app.set_default()
    with override_settings(DURABLE=durable_settings(extra), CELERY_BROKER_URL=own_redis):
        try:
            cluster.workers(("A", WORKER_QUEUES), ("B", WORKER_QUEUES), concurrency=2)
            runs = start_batches("iq_flush", 4, 10, key=None, hold=0.05)
            wait_until(lambda: len(executions("iq_flush")) >= 6, "some steps to run", diagnostics=cluster.diagnostics)
            assert redis.Redis.from_url(own_redis).flushall()
            sweeper = cluster.sweeper()
            # Admitted steps whose message was flushed wait for their admission's lease, as the time passing would.
            hook = lapse_when_stalled(
                lambda: lapse_step_leases(runs, "pending"), lambda: len(executions("iq_flush")), stall=3.0
            )
            wait_completed(cluster, runs, hook=hook)
            sweeper.stop()
        finally:
            cluster.close()
            _use_broker(celery_app, broker_url())
    rows = executions("iq_flush")
    assert sorted((row["run_id"], row["seq"]) for row in rows if row["attempt"] == 1) == sorted(
        Checkpoint.objects.filter(run_id__in=runs, kind="step").values_list("run_id", "seq")
    )
    assert max_overlap(rows) <= 2
    assert Checkpoint.objects.filter(run_id__in=runs, kind="step", status="completed").count() == 40


@pytest.mark.durable_settings(QUEUES=QUEUES)
@pytest.mark.timeout(300)
def test_a_rate_of_20_per_second_over_30_seconds(cluster):
    """620 steps of a ``20/s`` queue: between 18 and 22 admissions in every sliding second.

    Asserted on the start times the engine granted (``admitted_at``), one
    interval (50 ms) apart whenever steps wait: a loaded worker runs a step
    later than granted, but cannot move its grant.
    """
    cluster.workers(("A", WORKER_QUEUES), ("B", WORKER_QUEUES), concurrency=4)
    cluster.sweeper()
    runs = start_batches("iq_rate", 62, 10, key=None, hold=0.0)
    wait_completed(cluster, runs, timeout=180)
    admitted = sorted(Checkpoint.objects.filter(run_id__in=runs).values_list("admitted_at", flat=True))
    assert len(admitted) == 620
    second = timedelta(seconds=1)
    last = admitted[-1] - second
    windows = [sum(1 for t in admitted if start <= t < start + second) for start in admitted if start <= last]
    assert windows and min(windows) >= 18 and max(windows) <= 22, (min(windows), max(windows))
    assert admitted[-1] - admitted[0] >= timedelta(seconds=30)
    # Executions never start before their grant.
    starts = {(row["run_id"], row["seq"]): row["started"] for row in executions("iq_rate")}
    grants = Checkpoint.objects.filter(run_id__in=runs).values_list("run_id", "seq", "admitted_at")
    assert all(starts[(run, seq)] >= at.timestamp() - 0.001 for run, seq, at in grants)


@pytest.mark.durable_settings(QUEUES=QUEUES)
@pytest.mark.timeout(300)
def test_a_limit_changed_through_the_api_takes_effect_without_restarting_workers(cluster):
    """Concurrency 1, then 3 through ``PATCH /api/durable/queues/iq_api/``, the same two workers throughout."""
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    workers = cluster.workers(("A", WORKER_QUEUES), ("B", WORKER_QUEUES), concurrency=4)
    runs = start_batches("iq_api", 6, 10, key=None, hold=0.03)
    wait_until(lambda: len(executions("iq_api")) >= 8, "some steps at concurrency 1", diagnostics=cluster.diagnostics)
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("ops", password="pw"))
    changed_at = time.time()
    response = client.patch("/api/durable/queues/iq_api/", {"concurrency": 3}, format="json")
    assert response.status_code == 200 and response.json()["concurrency"] == 3
    wait_completed(cluster, runs)
    assert all(proc.alive() for proc in workers)
    rows = executions("iq_api")
    before = [row for row in rows if row["started"] < changed_at]
    after = [row for row in rows if row["started"] > changed_at]
    assert len(before) >= 8 and max_overlap(before) == 1
    assert 2 <= max_overlap(after) <= 3
