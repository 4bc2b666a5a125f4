"""Benchmark: the schedule sweep with 10,000 schedules (a benchmark, not a timed test).

    python -m bench.schedules                       # 10,000 schedules, PostgreSQL database bench_schedules
    python -m bench.schedules --schedules 2000 --not-due-sweeps 20

Two figures:

1. **Due**: 10,000 schedules whose windows fall in the same minute. The sweep
   is called (page after page of ``SWEEP_BATCH``) until none is due; reported:
   the wall time from the window to the last run inserted (the issue asks for
   at most 5 s) and the cost per schedule.
2. **Not due**: the same 10,000 schedules, their next window a minute away;
   reported: the time of one sweep that finds nothing due (median and maximum;
   the issue asks for under 50 ms).

The clock is a fake one standing at the window (so the measured time is the
sweep's own, not a wait for the minute); the transport is ``manual`` (runs are
inserted and announced, their turns are not executed: that is the turn
benchmarks' business). The database ``bench_schedules`` is dropped and created
again at every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

DB = os.environ.get("BENCH_SCHEDULES_DB", "postgres://postgres@127.0.0.1:5432/bench_schedules")
os.environ["DATABASE_URL"] = DB
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
os.environ.setdefault("BENCH_TRANSPORT", "manual")


def _recreate_database() -> None:
    import psycopg

    base, name = DB.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--not-due-sweeps", type=int, default=50)
    args = parser.parse_args()
    _recreate_database()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from bench import workflows as _registered  # noqa: F401
    from durable.runtime import get_engine
    from durable.schedules.plan import new_row
    from durable.schedules.spec import Schedule, ScheduleOrigin
    from durable.schedules.sweep import fire_due_schedules
    from durable.testing import fake_clock

    window = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    engine = get_engine()
    workflow = "bench_local"
    spec = Schedule(every="1m")
    with fake_clock(window - timedelta(seconds=30)) as clock:
        from durable.models import Schedule as Row

        rows = [
            new_row(f"bench-{i:05d}", workflow, spec, ScheduleOrigin.RUNTIME, clock.now(), code=False)
            for i in range(args.schedules)
        ]
        Row.objects.bulk_create([Row(**row) for row in rows], batch_size=2000)
        fire_due_schedules(engine)  # the process's first sweep syncs code schedules (none here)
        clock.set(window)
        started, cpu = time.perf_counter(), time.process_time()
        ticks = runs = 0
        while runs < args.schedules:
            # One call is one tick's schedule sweep (pages while full, for up to WORKER_INTERVAL).
            runs += fire_due_schedules(engine)
            ticks += 1
        due_seconds, due_cpu = time.perf_counter() - started, time.process_time() - cpu
        clock.set(window + timedelta(seconds=1))
        sweeps = []
        for _ in range(args.not_due_sweeps):
            t = time.perf_counter()
            assert fire_due_schedules(engine) == 0
            sweeps.append(time.perf_counter() - t)
    report = {
        "schedules": args.schedules,
        "store": type(engine.store).__name__,
        "sweep_batch": engine.settings.sweep_batch,
        "worker_interval": engine.settings.worker_interval,
        "due": {
            "runs_started": runs,
            "ticks": ticks,
            "seconds_to_last_run": round(due_seconds, 3),
            "ms_per_schedule": round(due_seconds * 1000 / max(runs, 1), 4),
            # This process's CPU (planning, parameters); the rest of the wall time is the database.
            "sweeper_cpu_ms_per_schedule": round(due_cpu * 1000 / max(runs, 1), 4),
        },
        "not_due": {
            "sweeps": len(sweeps),
            "median_ms": round(statistics.median(sweeps) * 1000, 3),
            "max_ms": round(max(sweeps) * 1000, 3),
        },
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
