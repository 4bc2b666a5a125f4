"""Measurements at table scale (run by ``bench/run.py``, workload 7, in a process of its own).

    python -m bench.scale seed --runs 1000000      # that many completed runs, inserted in one statement
    python -m bench.scale starts --samples 2000    # durable.start() latency, one call at a time

``DATABASE_URL`` names the database (the driver gives each side of workload 7
its own). ``seed`` copies one template run (completed, with output, as the ORM
writes it) by ``INSERT ... SELECT`` over ``generate_series`` and analyses the
table, so a million rows take seconds, not an hour of starts. ``starts`` times
each ``durable.start()`` on the transport ``BENCH_TRANSPORT`` names (the driver
uses ``manual``: the start's own statements, no turn beside it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from datetime import timedelta
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

import durable  # noqa: E402
from bench import common  # noqa: E402
from bench.fixtures import copy_template  # noqa: E402
from durable.models import Run  # noqa: E402


def cmd_seed(args: argparse.Namespace) -> dict[str, Any]:
    """``runs`` completed runs of ``bench_local``, finished over the last ``runs`` milliseconds."""
    started = time.perf_counter()
    now = timezone.now() - timedelta(hours=1)
    Run.objects.create(
        id="seed-template", workflow="bench_local", status="completed", input={"args": [3], "kwargs": {}},
        output=3, created_at=now, updated_at=now, started_at=now, finished_at=now, turns=1,
    )  # fmt: skip
    offset = "t.\"{c}\" - g * interval '1 millisecond'"
    columns = {"id": "'seed-' || g", **{c: offset.format(c=c) for c in ("created_at", "updated_at", "finished_at")}}
    copy_template(Run, "seed-template", columns, f"generate_series(1, {args.runs}) g")
    Run.objects.filter(id="seed-template").delete()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durable_run")
        cursor.execute("SELECT pg_total_relation_size('durable_run')")
        size = cursor.fetchone()[0]
    return {"runs": args.runs, "seconds": time.perf_counter() - started, "table_bytes": size}


def cmd_starts(args: argparse.Namespace) -> dict[str, Any]:
    """Latency of ``durable.start()`` with the table as it is, ``samples`` calls one after another."""
    tag = uuid.uuid4().hex[:8]
    for i in range(args.warmup):
        durable.start("bench_local", 3, run_id=f"sw-{tag}-{i}")
    lat = []
    for i in range(args.samples):
        t = time.perf_counter()
        durable.start("bench_local", 3, run_id=f"s-{tag}-{i}")
        lat.append((time.perf_counter() - t) * 1000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'durable_run'")
        rows = cursor.fetchone()[0]
    return {
        "samples": args.samples,
        "table_rows_estimate": rows,
        "p50_ms": common.percentile(lat, 50),
        "p99_ms": common.percentile(lat, 99),
        "mean_ms": statistics.fmean(lat),
        "max_ms": max(lat),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("seed")
    p.add_argument("--runs", type=int, default=1_000_000)
    p = sub.add_parser("starts")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    from django.conf import settings

    transport = os.environ.get("BENCH_TRANSPORT", "manual")
    with override_settings(DURABLE={**settings.DURABLE, "TRANSPORT": transport}):
        result = cmd_seed(args) if args.cmd == "seed" else cmd_starts(args)
    common.emit(result)


if __name__ == "__main__":
    main()
