"""Limited-queue throughput on ``celery worker`` processes (``python -m bench.queues``, see there).

The same runs as the in-process figure, dispatched through Redis to one
``celery worker -c N`` (prefork) that consumes the turn queue and both step
queues: the driver only starts the runs and waits for them, and every turn,
step and admission runs in the worker's processes, as in a deployment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.queues import DB, QUEUES, turns_per_run, wait_completed

WORKER_QUEUES = "durable,bq_limited,bq_free,bq_one"
BROKER = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/11")


class Worker:
    """One ``celery worker -c concurrency`` with the benchmark's queues, started and stopped around a block."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="bench-queues-"))

    def __enter__(self) -> Worker:
        import redis

        redis.Redis.from_url(BROKER).flushdb()
        ready = self._dir / "ready"
        env = dict(
            os.environ,
            DATABASE_URL=DB,
            BENCH_QUEUES_DB=DB,
            BENCH_QUEUES="1",
            BENCH_TRANSPORT="celery",
            BENCH_READY_FILE=str(ready),
            BENCH_DURABLE=json.dumps({"QUEUES": QUEUES}),
        )
        cmd = [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker", "-c", str(self.concurrency)]
        cmd += ["-Q", WORKER_QUEUES, "-l", "WARNING"]
        with open(self._dir / "worker.log", "wb") as log:
            self._proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"celery worker did not start; see {self._dir / 'worker.log'}")
            time.sleep(0.1)
        return self

    def __exit__(self, *_: Any) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def throughput(queue: str, runs: int, steps: int, tag: str = "") -> dict[str, Any]:
    """``runs`` runs of ``steps`` steps of ``queue``, started here and run by the worker: steps/s."""
    from django.test import override_settings

    import bench.celery_app  # noqa: F401  (the driver sends through the benchmark's Celery app)
    import durable

    settings = {"TRANSPORT": "celery", "EMBEDDED_WORKER": False, "QUEUES": QUEUES}
    with override_settings(DURABLE=settings):
        started = time.perf_counter()
        ids = [durable.start("bq.fan", {"queue": queue, "n": steps}, run_id=f"c-{queue}-{tag}{i}") for i in range(runs)]
        wait_completed(ids)
        seconds = time.perf_counter() - started
    return {
        "queue": queue,
        "steps": runs * steps,
        "seconds": round(seconds, 3),
        "steps_per_s": round(runs * steps / seconds, 1),
        "turns_per_run": turns_per_run(ids),
    }
