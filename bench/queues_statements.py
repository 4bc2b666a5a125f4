"""Server time per statement of limited and unlimited step queues on Celery (a benchmark, not a test).

    python -m bench.queues_statements          # PostgreSQL database bench_queues, dropped and created again

Needs ``pg_stat_statements`` in the server's ``shared_preload_libraries``.
On one ``celery worker -c 4`` (:mod:`bench.queues_celery`), for the queue
with no limit and then for ``concurrency: 50``: 5 runs of 100 steps to warm
up, a ``VACUUM (ANALYZE)``, the statistics reset, then ``--runs`` runs of
100 dispatched steps. Reported per queue: steps/s, the server's execution
time of every statement of the measurement, and its most expensive
statements (calls, total and mean ms, shared buffers hit per call, WAL
records). ``--inline THREADS``: the same in this process, the steps on
``THREADS`` threads of the in-process transport (as ``python -m bench.queues``
measures its first throughput). A step's result is the statement that begins ``WITH old AS`` (or
``WITH RECURSIVE old AS`` when it also reads a limited queue). One
measurement each, not pairs: what it shows is where a queue limit spends its
server time, not a ratio. The report (JSON) goes to standard output and to
``bench/results/queues-statements-<UTC time>.json`` with the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from datetime import UTC, datetime
from typing import Any

from bench import queues as bq

TOP = """
SELECT calls, round(total_exec_time::numeric, 1)::float, round(mean_exec_time::numeric, 3)::float,
       round(shared_blks_hit::numeric / calls, 1)::float, wal_records,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 100)
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND calls > 0  -- with track_planning, a statement planned and not yet run has none
ORDER BY total_exec_time DESC LIMIT %s
"""
TOTAL = """
SELECT sum(calls)::bigint, round(sum(total_exec_time)::numeric, 1)::float, sum(wal_records)::bigint
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
COLUMNS = ("calls", "total_ms", "mean_ms", "buffers_per_call", "wal_records", "statement")


def _measure(queue: str, runs: int, top: int, inline: int) -> dict[str, Any]:
    from django.db import connection

    from bench import queues_celery

    def measure(count: int, tag: str) -> dict[str, Any]:
        if inline:
            return bq.throughput(queue, count, 100, inline, tag=tag)
        return queues_celery.throughput(queue, count, 100, tag=tag)

    measure(5, "warm-")
    bq.vacuum()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_statements_reset()")
    result = measure(runs, "pss-")
    with connection.cursor() as cursor:
        cursor.execute(TOP, [top])
        statements = [dict(zip(COLUMNS, row, strict=True)) for row in cursor.fetchall()]
        cursor.execute(TOTAL)
        calls, total_ms, wal = cursor.fetchone()
    return {**result, "server": {"calls": calls, "total_ms": total_ms, "wal_records": wal}, "top": statements}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=8, help="statements listed per queue")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument(
        "--inline", type=int, default=0, metavar="THREADS", help="in this process on THREADS threads, not on Celery"
    )
    args = parser.parse_args()
    started = datetime.now(UTC)
    bq.prepare()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('shared_preload_libraries')")
        if "pg_stat_statements" not in cursor.fetchone()[0]:
            raise SystemExit("pg_stat_statements is not in the server's shared_preload_libraries")
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    from bench import queues_celery
    from bench.conditions import machine, write_result

    report: dict[str, Any] = {"machine": machine(bq.DB, queues_celery.BROKER, bq._code(), private=False)}
    report["executor"] = f"in this process, {args.inline} threads" if args.inline else "celery worker -c 4"
    with contextlib.nullcontext() if args.inline else queues_celery.Worker(4):
        for queue in ("bq_free", "bq_limited"):
            bq.vacuum()
            report[queue] = _measure(queue, args.runs, args.top, args.inline)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stderr.write(f"written to {write_result(args.out, 'queues-statements-', started, report)}\n")


if __name__ == "__main__":
    main()
