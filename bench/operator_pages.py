"""Benchmark: the operator's admin pages over 1,000,000 runs in PostgreSQL (goal: each under 300 ms).

Usage::

    .venv/bin/python bench/operator_pages.py [--rows 1000000] [--repeat 7] [--database durable_bench_operator]

It fills a scratch database of its own on the server of ``$BENCH_PG`` (default
``postgres://postgres@127.0.0.1:5432``) with the runs of ``bench/admin_list.py``,
gives every failed and dead run an error (five codes), gives each run a
completed step checkpoint and the active ones a pending or running dispatched
step on one of eight queues, and advertises twenty live workers. Then it times,
in-process with Django's test client, the median of ``--repeat`` requests of:
the run list (which now reads each row's error code and message start), the
list of failed runs, the list filtered by an error code, and the workers page.
Not a test: it prints the figures and whether each is under the goal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.admin_list import fill, setup_django  # noqa: E402

GOAL_MS = 300.0
CODES = ["declined", "timeout", "not_found", "conflict", "step_failed"]

ERRORS = f"""
UPDATE durable_run SET error = jsonb_build_object(
    'code', (ARRAY{CODES!r})[1 + mod(substr(id, 7)::int, {len(CODES)})],
    'message', 'step ''charge'' failed after 5 attempt(s): the card of order ' || substr(id, 7) || ' was declined',
    'type', 'StepFailed')
WHERE status IN ('failed', 'dead') AND error IS NULL
"""

# One completed local step per run; a dispatched step pending (or running) for each active run.
CHECKPOINTS = """
INSERT INTO durable_checkpoint (run_id, seq, name, kind, status, input, output, error, attempts, wake_at,
    retry_at, timeout_at, queue, locked_by, dispatches, enqueued_at, started_at, finished_at, heartbeat_at,
    progress, events)
SELECT r.id, 1, 'prepare', 'local', 'completed', NULL::jsonb, '"ready"'::jsonb, NULL::jsonb, 1,
    NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::varchar, NULL::varchar, 0, NULL::timestamptz,
    r.started_at, r.started_at, NULL::timestamptz, NULL::jsonb, '[]'::jsonb
FROM durable_run r
UNION ALL
SELECT r.id, 2, 'charge', 'step', CASE WHEN r.status = 'running' THEN 'running' ELSE 'pending' END, NULL, NULL,
    NULL, 1, r.created_at + interval '30 seconds', NULL, NULL, 'queue-' || mod(ascii(right(r.id, 1)), 8),
    NULL, 1, r.created_at, CASE WHEN r.status = 'running' THEN r.started_at END, NULL, NULL, NULL, '[]'::jsonb
FROM durable_run r WHERE r.status IN ('pending', 'running', 'suspended')
"""


def prepare(rows: int) -> None:
    from django.db import connection

    from durable.models import WorkerDescriptor
    from durable.runtime import now

    fill(rows)
    with connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute(ERRORS)
        cursor.execute("SELECT count(*) FROM durable_checkpoint")
        if cursor.fetchone()[0] == 0:
            print("inserting checkpoints ...", flush=True)
            cursor.execute(CHECKPOINTS)
        print(f"errors and checkpoints ready in {time.perf_counter() - started:.1f}s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE durable_run")
        cursor.execute("VACUUM ANALYZE durable_checkpoint")
    WorkerDescriptor.objects.all().delete()
    for i in range(20):
        WorkerDescriptor.objects.create(
            id=f"bench-worker-{i}",
            hostname=f"host-{i}",
            pid=1000 + i,
            queues=[f"queue-{i % 8}"],
            steps=[f"step_{n}" for n in range(40)],
            workflows=[f"wf_{n}:1" for n in range(10)],
            capabilities={"region": "eu"},
            protocol=2,
            heartbeat_at=now(),
            expires_at=now() + timedelta(hours=1),
        )


def measure(client: Any, url: str, repeat: int) -> tuple[float, float, int]:
    """Median wall-clock and process CPU milliseconds of ``repeat`` requests (after a warm-up).

    The CPU figure is this process's own work (rendering, the ORM); the wall-clock one adds the
    database's time and, on a busy machine, the wait for a core.
    """
    client.get(url)
    walls, cpus, status = [], [], 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        status = client.get(url).status_code
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--database", default="durable_bench_operator")
    args = parser.parse_args()
    setup_django(args.database)
    prepare(args.rows)

    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", "", "bench")
    admin = Client()
    admin.force_login(user)
    pages = [
        ("run list, unfiltered (error column)", "/admin/durable/run/"),
        ("run list, status=failed", "/admin/durable/run/?status=failed"),
        ("run list, error code=declined", "/admin/durable/run/?error_code=declined"),
        ("run list, error code=none-such", "/admin/durable/run/?error_code=none-such"),
        ("workers page", "/admin/durable/run/workers/"),
    ]
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"\n{'page':44} {'wall ms':>8} {'cpu ms':>8} {'status':>7}  goal {GOAL_MS:.0f} ms (wall)")
    for label, url in pages:
        wall, cpu, status = measure(admin, url, args.repeat)
        verdict = "ok" if wall < GOAL_MS and status == 200 else "OVER"
        print(f"{label:44} {wall:8.1f} {cpu:8.1f} {status:7d}  {verdict}")


if __name__ == "__main__":
    main()
