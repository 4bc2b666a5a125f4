"""Run every benchmark, print the table, write ``bench/results/<timestamp>.json``.

    ./bench/run                      # everything (creates bench/.venv on first use)
    ./bench/run --only w1,w6         # some workloads
    ./bench/run --rev HEAD           # measure a committed revision of durable/ instead of the work tree
    ./bench/run --size quick         # small sizes, to try the harness
    ./bench/run --size issue         # the issue's sizes (1,000,000 finished runs, 100,000 sleepers, ...)
    ./bench/run --size quick --set w7_runs=50000   # one size changed

Each measurement runs in a process of its own (``bench.ours``, ``bench.peer_dbos``,
``bench.peer_celery``, ``bench.scale``); the worker processes it needs (``celery
worker -c 2``, two DBOS queue workers, two ``durable_worker``) are started here
and stopped afterwards. The databases (``bench`` and ``bench_dbos`` unless
``BENCH_DATABASE_URL`` / ``BENCH_DBOS_DATABASE_URL`` or the flags name others; on
the private cluster only their names are used) are dropped and created again
at the start of every run.

Repetitions of ours and the peer alternate; after every repetition the load
average and the commit latency (a single-insert transaction, fsync'd) are
sampled. Rows show the paired ratio (the median of the per-repetition ratios)
beside the ratio of the medians. A run whose load exceeded the cores is
flagged ``"noisy": true`` with a loud warning.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import workloads, workloads_workers
from bench.common import PrivatePostgres, db_name
from bench.conditions import machine, print_machine, warn_if_noisy, write_result
from bench.harness import (
    BENCH,
    DEFAULT_DB,
    DEFAULT_DBOS_DB,
    DEFAULT_REDIS,
    PY,
    Harness,
    bench_redis,
    code_under_test,
    reset_database,
    reset_redis,
)
from bench.sizes import SIZES, WORKLOADS, parse_overrides
from bench.table import print_sql, print_table, rows

RUNNERS = {
    "w1": workloads.run_w1,
    "w2": workloads.run_w2,
    "w3": workloads.run_w3,
    "w6": workloads.run_w6,
    "w4": workloads_workers.run_w4,
    "w5": workloads_workers.run_w5,
    "w8": workloads_workers.run_w8,
    "w7": workloads_workers.run_w7,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="./bench/run", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"comma-separated workloads ({', '.join(WORKLOADS)})"
    )
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="standard",
        help="standard: ~10 minutes on 2 cores; issue: the issue's sizes; quick: try the harness",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one size of the chosen --size (e.g. w7_runs=100000); repeatable",
    )
    parser.add_argument("--rev", help="measure durable/ from this git revision instead of the work tree")
    parser.add_argument(
        "--pg",
        choices=["private", "shared"],
        default=os.environ.get("BENCH_PG", "private"),
        help="private: start a PostgreSQL cluster of our own (pg_stat_statements loaded; the "
        "databases get the names of --database-url/--dbos-url); shared: use those URLs as they are",
    )
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--dbos-url", default=os.environ.get("BENCH_DBOS_DATABASE_URL", DEFAULT_DBOS_DB))
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS),
        help="a Redis database of the benchmark's own (flushed), or 'private': a redis-server "
        "started for this run on a free port",
    )
    parser.add_argument(
        "--dbos-tight-poll",
        type=float,
        default=float(os.environ.get("BENCH_DBOS_TIGHT_POLL", "0.001")),
        help="DBOS's queue polling interval for the 'tight' configuration of w4 (seconds; default "
        "0.001, the smallest polling interval DBOS documents; its queue default is 1 s)",
    )
    parser.add_argument("--out", default=str(BENCH / "results"))
    parser.add_argument(
        "--otel",
        action="store_true",
        help="durable with DURABLE['OPENTELEMETRY'] on: the SDK installed in every process, spans and "
        "metrics recorded, spans exported to a discarding exporter (bench/apps.py)",
    )
    return parser.parse_args(argv)  # fmt: skip


def measure_all(h: Harness, only: list[str], sizes: dict[str, Any]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in only:
        print(f"==> {name}", flush=True)
        t = time.monotonic()
        results[name] = RUNNERS[name](h, sizes)
        print(f"   ({time.monotonic() - t:.0f} s)", flush=True)
    return results


def main() -> None:
    args = parse_args()
    if args.otel:
        os.environ["BENCH_OTEL"] = "1"  # inherited by every process this run starts
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in only if w not in RUNNERS]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}: choose from {', '.join(WORKLOADS)}")
    sizes = {**SIZES[args.size], **parse_overrides(args.set, SIZES[args.size])}
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-"))
    pythonpath, code = code_under_test(args, tmp)
    logdir = tmp / "logs"
    logdir.mkdir()
    private = PrivatePostgres(tmp) if args.pg == "private" else None
    if private is not None:
        args.database_url = f"{private.url}/{db_name(args.database_url)}"
        args.dbos_url = f"{private.url}/{db_name(args.dbos_url)}"
    args.redis_url, redis = bench_redis(tmp, args.redis_url)
    harness = Harness(args, logdir, pythonpath)
    started, t0 = datetime.now(UTC), time.monotonic()
    try:
        print(f"==> resetting {args.database_url}, {args.dbos_url}, {args.redis_url}", flush=True)
        reset_database(args.database_url)
        reset_database(args.dbos_url)
        reset_redis(args.redis_url)
        harness.run([PY, "-m", "django", "migrate", "-v0"])
        info = machine(args.database_url, args.redis_url, code, private=private is not None)
        print_machine(info)
        results = measure_all(harness, only, sizes)
        conditions = harness.conditions.report()
    finally:
        harness.stop_all()
        if private is not None:
            private.stop()
        if redis is not None:
            redis.stop()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    table = rows(results, sizes)
    report(info, table, results, conditions)
    doc = {
        "started_at": started.isoformat(),
        "duration_s": round(time.monotonic() - t0, 1),
        "command": " ".join(["./bench/run", *sys.argv[1:]]),
        "size": args.size,
        "otel": bool(args.otel),
        "sizes": sizes,
        "noisy": conditions["noisy"],
        "machine": info,
        "conditions": conditions,
        "table": table,
        "results": results,
        "logs": str(logdir),
    }
    path = write_result(args.out, "", started, doc)
    print(f"\nresults: {path}  (process logs: {logdir}; total {doc['duration_s']:.0f} s)")
    warn_if_noisy(conditions)
    shutil.rmtree(tmp / "code", ignore_errors=True)


def report(info: dict[str, Any], table: list[dict[str, Any]], results: dict[str, Any], cond: dict[str, Any]) -> None:
    print()
    print_machine(info)
    load, commit = cond["loadavg_1m"], cond["commit_p50_ms"]
    if cond["samples"]:
        print(
            f"over {cond['samples']} repetitions: load {load['median']:.2f} (max {load['max']:.2f}) on {cond['cores']} "
            f"cores; single-insert commit p50 {commit['median']:.2f} ms ({commit['min']:.2f}-{commit['max']:.2f})"
        )
    warn_if_noisy(cond)
    print()
    print_table(table)
    print_sql(results)


if __name__ == "__main__":
    main()
