"""What the database's backends wait on while limited and unlimited queues run (a benchmark, not a test).

    python -m bench.queues_waits                  # PostgreSQL database bench_queues, dropped and created again

In this process, on the in-process transport with ``--threads`` threads (as
``python -m bench.queues`` measures its first throughput), or with
``--celery N`` on one ``celery worker -c N`` (as its second): ``--reps``
repetitions, each one measurement of ``--runs`` runs of 100 dispatched steps
on the queue with no limit and one on ``concurrency: 50`` (the order
alternating). While each measurement runs, a thread samples
``pg_stat_activity`` of the benchmark's database about every 3 ms and counts
its active client backends by what they wait on (``CPU`` when they wait on
nothing; on the CPU or for a heavyweight lock, also the first 40 characters
of the statement and its query id, which the benchmark's database computes
for its new sessions: two statements that begin alike are told apart). The
report gives, per queue, the steps/s of each repetition and the samples
summed over the repetitions with each state's share and its samples per
1,000 steps (the same sampling rate in both queues, so these compare across
them). Needs no server extension. The report (JSON) goes to standard output
and to ``bench/results/queues-waits-<UTC time>.json`` with the machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from bench import queues as bq

ACTIVE = """
SELECT COALESCE(wait_event_type, 'CPU'), COALESCE(wait_event, ''),
       CASE WHEN wait_event_type IS NULL OR wait_event_type = 'Lock'
            THEN left(regexp_replace(query, '\\s+', ' ', 'g'), 40) || COALESCE(' #' || query_id, '') ELSE '' END
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend' AND state = 'active'
"""


def _sample(stop: threading.Event, counts: collections.Counter[tuple[str, str, str]]) -> None:
    import psycopg

    from bench.common import pg_url

    with psycopg.connect(pg_url(bq.DB), autocommit=True) as conn:
        while not stop.is_set():
            for row in conn.execute(ACTIVE):
                counts[tuple(row)] += 1  # type: ignore[arg-type]
            time.sleep(0.003)


def measure(queue: str, runs: int, threads: int, tag: str, counts: collections.Counter[Any]) -> float:
    """One throughput measurement of ``queue`` with its backends sampled into ``counts``; its steps/s.

    ``threads`` 0: on the Celery worker started by :func:`main` (``--celery``).
    """
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(stop, counts), daemon=True)
    sampler.start()
    try:
        if threads:
            result = bq.throughput(queue, runs, 100, threads, tag=tag)
        else:
            from bench import queues_celery

            result = queues_celery.throughput(queue, runs, 100, tag=tag)
    finally:
        stop.set()
        sampler.join()
    return float(result["steps_per_s"])


def summary(counts: collections.Counter[tuple[str, str, str]], steps: int) -> list[dict[str, Any]]:
    """Each state's samples, share and samples per 1,000 steps, most frequent first."""
    total = sum(counts.values()) or 1
    return [
        {
            "wait_type": kind,
            "wait_event": event,
            "statement": statement,
            "samples": n,
            "share": round(n / total, 3),
            "per_1000_steps": round(n * 1000 / steps, 1),
        }
        for (kind, event, statement), n in counts.most_common()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--celery", type=int, default=0, help="on one celery worker -c N (0: in this process)")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    started = datetime.now(UTC)
    bq.prepare()
    _query_ids()
    from bench import queues_celery
    from bench.conditions import machine, write_result

    if args.celery:
        with queues_celery.Worker(args.celery):
            report = _measure_all(args, 0)
    else:
        report = _measure_all(args, args.threads)
    report["machine"] = machine(bq.DB, queues_celery.BROKER, bq._code(), private=False)
    report["transport"] = f"celery worker -c {args.celery}" if args.celery else f"in-process, {args.threads} threads"
    report["load_at_end"] = list(os.getloadavg())
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stderr.write(f"written to {write_result(args.out, 'queues-waits-', started, report)}\n")


def _query_ids() -> None:
    """The benchmark's database computes a query id for its new sessions (shown in ``pg_stat_activity``)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{connection.settings_dict["NAME"]}" SET compute_query_id = on')


def _measure_all(args: argparse.Namespace, threads: int) -> dict[str, Any]:
    """The repetitions, each queue sampled in turn (the order alternating); per queue, speeds and states."""
    report: dict[str, Any] = {}
    counts = {queue: collections.Counter[tuple[str, str, str]]() for queue in ("bq_free", "bq_limited")}
    speeds: dict[str, list[float]] = {queue: [] for queue in counts}
    for rep in range(args.reps):
        order = list(counts) if rep % 2 == 0 else list(counts)[::-1]
        for queue in order:
            bq.vacuum()
            speeds[queue].append(measure(queue, args.runs, threads, f"w{rep}-", counts[queue]))
    steps = args.reps * args.runs * 100
    for queue in counts:
        report[queue] = {"steps_per_s": speeds[queue], "steps": steps, "states": summary(counts[queue], steps)}
    return report


if __name__ == "__main__":
    main()
