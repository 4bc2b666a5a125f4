"""Benchmark: limited step queues (``DURABLE["QUEUES"]``), a benchmark, not a timed test.

    python -m bench.queues                          # PostgreSQL database bench_queues, dropped and created again
    python -m bench.queues --runs 4 --steps 25 --latency-steps 40 --count-steps 20   # a quick try

The report (JSON) goes to standard output and to ``--out``/``queues-<UTC
time>.json`` (default ``bench/results``), with the machine, the versions, the
commit latency at the start, the load at the end and the server's
``autovacuum`` setting (each throughput measurement begins after a ``VACUUM
(ANALYZE)`` of the engine's tables, outside the measured time). Three
figures, each on a queue with a limit and on the same step routed to a queue
with none:

1. **Throughput**: ``--runs`` runs of ``--steps`` dispatched steps each (a
   ``ctx.gather`` fan-out), on the in-process transport with
   ``WORKER_THREADS`` threads of this process; steps/s from the first start to
   the last run completed, with ``concurrency: 50`` and with no limit (the
   issue asks the first to be within 15% of the second). Measured in
   ``--pairs`` pairs, the two queues one after the other in each pair (the
   first of each pair alternating), so that a change of the machine's load
   hits both: the ratio of each pair and their median. Then the same on one
   ``celery worker -c N`` (``--celery N``, default 4; 0 skips it): the runs
   dispatched through Redis and every turn, step and admission run in the
   worker's processes, as deployed (:mod:`bench.queues_celery`). Each
   measurement also records the runs' mean ``turns`` (``turns_per_run``):
   every turn replays the whole fan-out, and a run woken by most of its
   results costs far more than its steps.
2. **Admission latency**: a queue with ``concurrency: 1`` and a backlog;
   for each step admitted after another one's result, the time from that
   result's write (its ``finished_at``) to the next step's admission
   (``admitted_at``), both written by the engine: p50, p90 and max (the issue
   asks for under 50 ms at p50).
3. **Statements per step**: one run of ``--count-steps`` steps executed in
   this thread (the manual transport; each admitted step run as a worker
   runs a delivered message), every statement of the start, the turns, the
   admissions and the steps counted and divided by the steps; limits on and
   off (the issue's target: at most one extra).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

DB = os.environ.get("BENCH_QUEUES_DB", "postgres://postgres@127.0.0.1:5432/bench_queues")
os.environ["DATABASE_URL"] = DB
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
QUEUES = {"bq_limited": {"concurrency": 50}, "bq_one": {"concurrency": 1}}


def _recreate_database() -> None:
    import psycopg

    base, name = DB.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def prepare() -> None:
    """The benchmark's database made anew, Django set up, migrated, and its workflow registered."""
    _recreate_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    register()


def register() -> dict[str, Any]:
    """The benchmark's workflow and steps (also in its Celery worker, under ``BENCH_QUEUES``)."""
    import durable

    def make(queue: str) -> Any:
        def work(i: int) -> int:
            return i

        return durable.step(name=f"{queue}.work", queue=queue)(work)  # one function per queue

    steps = {queue: make(queue) for queue in ("bq_limited", "bq_free", "bq_one")}

    @durable.workflow(name="bq.fan")
    def fan(ctx: Any, data: dict[str, Any]) -> int:
        step = steps[data["queue"]]
        return len(ctx.gather(*(durable.call(step, i) for i in range(data["n"]))))

    return steps


def _settings(transport: str, threads: int) -> dict[str, Any]:
    return {"TRANSPORT": transport, "EMBEDDED_WORKER": False, "WORKER_THREADS": threads, "QUEUES": QUEUES}


def wait_completed(run_ids: list[str], timeout: float = 600.0) -> None:
    """Until every run of ``run_ids`` completed, polled every 20 ms.

    One raw statement per poll: the driver shares the GIL with the worker
    threads it measures, and building an ORM query 50 times a second held it
    in 15-24% of the samples of a profiled throughput run.
    """
    from django.db import connection

    from durable.models import Run

    sql = f"SELECT count(*) FROM {Run._meta.db_table} WHERE id = ANY(%s) AND status <> 'completed'"
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while True:
            cursor.execute(sql, [run_ids])
            if cursor.fetchone()[0] == 0:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"runs did not complete within {timeout:.0f} s")
            time.sleep(0.02)


def turns_per_run(run_ids: list[str]) -> float:
    """The mean of the runs' ``turns`` (each a replay of the fan-out): read after they completed."""
    from django.db import connection

    from durable.models import Run

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT avg(turns) FROM {Run._meta.db_table} WHERE id = ANY(%s)", [run_ids])
        return round(float(cursor.fetchone()[0]), 1)


def throughput(queue: str, runs: int, steps: int, threads: int, tag: str = "") -> dict[str, Any]:
    from django.test import override_settings

    import durable

    with override_settings(DURABLE=_settings("inline", threads)):
        started = time.perf_counter()
        ids = [durable.start("bq.fan", {"queue": queue, "n": steps}, run_id=f"{queue}-{tag}{i}") for i in range(runs)]
        wait_completed(ids)
        seconds = time.perf_counter() - started
        from durable.runtime import get_engine

        get_engine().transport.shutdown(wait=True)
    return {
        "queue": queue,
        "steps": runs * steps,
        "seconds": round(seconds, 3),
        "steps_per_s": round(runs * steps / seconds, 1),
        "turns_per_run": turns_per_run(ids),
    }


def admission_latency(steps: int, threads: int) -> dict[str, Any]:
    from django.test import override_settings

    import durable
    from durable.models import Checkpoint

    with override_settings(DURABLE=_settings("inline", threads)):
        run_id = durable.start("bq.fan", {"queue": "bq_one", "n": steps}, run_id="latency")
        wait_completed([run_id])
        from durable.runtime import get_engine

        get_engine().transport.shutdown(wait=True)
    rows = list(
        Checkpoint.objects.filter(run_id=run_id).order_by("admitted_at").values_list("admitted_at", "finished_at")
    )
    gaps = [(nxt[0] - cur[1]).total_seconds() * 1000 for cur, nxt in itertools.pairwise(rows)]
    gaps.sort()
    return {
        "steps": steps,
        "p50_ms": round(statistics.median(gaps), 2),
        "p90_ms": round(gaps[int(len(gaps) * 0.9)], 2),
        "max_ms": round(gaps[-1], 2),
    }


def vacuum() -> None:
    """``VACUUM (ANALYZE)`` the engine's tables, outside the measured time.

    Each measurement leaves tens of thousands of dead row versions (no update
    of a run or a step is HOT); a server with autovacuum off (``autovacuum``
    is recorded in the report) would otherwise hand each later repetition a
    larger heap and indexes than the first, which is no deployment's steady state.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("durable_run", "durable_checkpoint", "durable_queue", "durable_signalwaiter"):
            cursor.execute(f"VACUUM (ANALYZE) {table}")


def paired_throughput(pairs: int, measure: Any) -> dict[str, Any]:
    """``pairs`` pairs of (no limit, concurrency 50), the order alternating; each pair's ratio and the median.

    ``measure(queue, tag)``: one throughput measurement of ``queue``.
    """
    free: list[dict[str, Any]] = []
    limited: list[dict[str, Any]] = []
    for pair in range(pairs):
        order = [("bq_free", free), ("bq_limited", limited)]
        for queue, into in order if pair % 2 == 0 else order[::-1]:
            vacuum()
            into.append(measure(queue, f"p{pair}-"))
    ratios = [lim["steps_per_s"] / fr["steps_per_s"] for fr, lim in zip(free, limited, strict=True)]
    return {
        "no_limit": free,
        "concurrency_50": limited,
        "ratios": [round(r, 3) for r in ratios],
        "ratio": round(statistics.median(ratios), 3),
    }


class _Counter:
    """Statements of this thread's connection while ``on`` (the driver's own polling is not counted)."""

    def __init__(self) -> None:
        self.on = False
        self.count = 0
        self.thread = threading.get_ident()

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self.on and threading.get_ident() == self.thread:
            self.count += 1
        return execute(sql, params, many, context)


def statements(queue: str, steps: int) -> dict[str, Any]:
    from django.db import connection
    from django.test import override_settings

    import durable
    from durable.models import Checkpoint
    from durable.runtime import get_engine

    counter = _Counter()
    with override_settings(DURABLE=_settings("manual", 1)), connection.execute_wrapper(counter):
        engine = get_engine()
        counter.on = True
        run_id = durable.start("bq.fan", {"queue": queue, "n": steps}, run_id=f"count-{queue}")
        engine.run_turn(run_id)
        counter.on = False
        while True:
            ready = list(
                Checkpoint.objects.filter(run_id=run_id, status="pending", kind="step")
                .exclude(admission="waiting")
                .values_list("seq", flat=True)
            )
            if not ready:
                break
            for seq in ready:
                counter.on = True
                engine.execute_step(run_id, seq)  # as a worker runs the delivered message
                counter.on = False
    status = durable.get_run(run_id).status
    return {
        "queue": queue,
        "steps": steps,
        "status": status,
        "statements": counter.count,
        "per_step": round(counter.count / steps, 2),
    }


def _setting(name: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return str(cursor.fetchone()[0])


def _code() -> str:
    """The code measured: the commit of this checkout and whether ``durable/`` has uncommitted changes."""
    import subprocess
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[1])
    head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    status = ["git", "-C", repo, "status", "--porcelain", "--", "durable"]
    dirty = subprocess.run(status, capture_output=True, text=True)
    state = "with uncommitted changes" if dirty.stdout.strip() else "clean"
    return f"durable/ at {head.stdout.strip()} ({state})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100, help="steps per run (throughput)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--latency-steps", type=int, default=300)
    parser.add_argument("--count-steps", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=3, help="throughput pairs (no limit, limited)")
    parser.add_argument(
        "--celery", type=int, default=4, metavar="N", help="also on a `celery worker -c N` (0: in-process only)"
    )
    parser.add_argument("--out", default="bench/results", help="where to write queues-<UTC time>.json")
    parser.add_argument("--prefix", default="queues-", help="the result file's name before its time")
    args = parser.parse_args()
    started = datetime.now(UTC)
    prepare()
    from bench.conditions import machine, write_result
    from bench.queues_celery import BROKER

    info = machine(DB, BROKER, _code(), private=False)  # before any measurement: the load at the start
    paired = paired_throughput(
        args.pairs, lambda queue, tag: throughput(queue, args.runs, args.steps, args.threads, tag=tag)
    )
    report: dict[str, Any] = {"machine": info, "throughput": paired}
    if args.celery:
        from bench import queues_celery

        with queues_celery.Worker(args.celery) as worker:
            report["throughput_celery"] = paired_throughput(
                args.pairs, lambda queue, tag: queues_celery.throughput(queue, args.runs, args.steps, tag=tag)
            )
            report["throughput_celery"]["worker_concurrency"] = worker.concurrency
    off, on = statements("bq_free", args.count_steps), statements("bq_limited", args.count_steps)
    report |= {
        "autovacuum": _setting("autovacuum"),
        "load": os.getloadavg(),
        "admission_latency": admission_latency(args.latency_steps, args.threads),
        "statements_per_step": {"no_limit": off, "limited": on, "extra": round(on["per_step"] - off["per_step"], 2)},
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stderr.write(f"written to {write_result(args.out, args.prefix, started, report)}\n")


if __name__ == "__main__":
    main()
