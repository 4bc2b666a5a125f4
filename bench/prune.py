"""Benchmark: retention pruning 1,000,000 finished runs (10 checkpoints each) beside workload 1.

    python -m bench.prune                                   # 1,000,000 runs, PostgreSQL database bench_prune
    python -m bench.prune --runs 20000 --w1-workflows 20 --w1-reps 2     # try the harness

Three phases on one database (``bench_prune``, dropped and created again):

1. **Fixture**: ``--runs`` runs ``completed`` 60 days ago, each with
   ``--checkpoints`` checkpoints, inserted by ``INSERT ... SELECT`` over
   ``generate_series`` from one template row per table (every column as the
   ORM writes it), then ``ANALYZE``.
2. **Workload 1 alone**: ``python -m bench.ours inproc`` (3 local steps per
   workflow, ``--mode`` signal or caller), ``--w1-reps`` repetitions, with the
   fixture in place.
3. **Beside the prune**: ``manage.py durable_prune --json`` in its own
   process deletes every expired run (``RETENTION_BATCH`` per transaction)
   (resting three times each batch's time between batches, as the sweep does;
   ``--fast``: flat out) while workload 1 repeats one repetition after another; only repetitions
   that ended before the prune did count. Then workload 1 once more alone,
   on the pruned tables.

Reported (printed, and written to ``bench/results/prune-<timestamp>.json``):
workload 1's workflows/s alone and beside (medians) and their ratio (the issue
asks for at least 0.8), the prune's rate in runs/s and rows/s, and the load
average. Run it on a quiet machine: the ratio means nothing when something
else competes for the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

DB = os.environ.get("BENCH_PRUNE_DB", "postgres://postgres@127.0.0.1:5432/bench_prune")
os.environ["DATABASE_URL"] = DB
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _recreate_database() -> None:
    import psycopg

    base, name = DB.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def build_fixture(runs: int, checkpoints: int, finished: datetime) -> float:
    """Insert the finished runs and their checkpoints; seconds it took."""
    from django.db import connection

    from bench.fixtures import copy_template
    from durable.models import Checkpoint, Run

    started = time.perf_counter()
    Run.objects.create(
        id="template", workflow="bench_old", status="completed", input={"n": 3}, output=3,
        created_at=finished, updated_at=finished, started_at=finished, finished_at=finished, turns=1,
    )  # fmt: skip
    cp = Checkpoint.objects.create(
        run_id="template", seq=0, name="s0", kind="local", status="completed", input={"args": [0]}, output=0,
        attempts=1, started_at=finished, finished_at=finished,
    )  # fmt: skip
    # Distinct finish times, oldest first by id, as real traffic would leave them.
    offset = "t.\"{c}\" - g * interval '1 millisecond'"
    run_columns = {"id": "'old-' || g", **{c: offset.format(c=c) for c in ("created_at", "finished_at")}}
    copy_template(Run, "template", run_columns, f"generate_series(1, {runs}) g")
    cp_columns = {"run_id": "'old-' || g", "seq": "s", "name": "'s' || s"}
    copy_template(
        Checkpoint, cp.pk, cp_columns, f"generate_series(1, {runs}) g, generate_series(0, {checkpoints - 1}) s"
    )
    Run.objects.filter(id="template").delete()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durable_run")
        cursor.execute("ANALYZE durable_checkpoint")
    return time.perf_counter() - started


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=DB, DJANGO_SETTINGS_MODULE="bench.settings", PYTHONUNBUFFERED="1", **extra)
    return env


def w1(args: argparse.Namespace, reps: int, warmup: int) -> list[float]:
    """Workload 1 in its own process: workflows/s of each repetition."""
    cmd = [sys.executable, "-m", "bench.ours", "inproc", "--mode", args.mode, "--workflows", str(args.w1_workflows)]
    cmd += ["--reps", str(reps), "--warmup", str(warmup)]
    out = subprocess.run(cmd, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"workload 1 failed:\n{(out.stdout + out.stderr)[-3000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("@@RESULT ")][-1]
    result = json.loads(line[len("@@RESULT ") :])
    # One figure per repetition: the summary's median is the repetition itself when reps == 1.
    return [result["workflows_per_s"]["median"]] if reps == 1 else list(result["workflows_per_s"]["values"])


def beside(args: argparse.Namespace) -> tuple[dict[str, Any], list[float], float]:
    """Start the prune, repeat workload 1 until it ends; the prune's report, the overlapping reps, its seconds."""
    cmd = [sys.executable, "manage.py", "durable_prune", "--json", *(["--fast"] if args.fast else [])]
    started = time.perf_counter()
    prune = subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rates: list[float] = []
    while prune.poll() is None:
        rate = w1(args, 1, 3)
        if prune.poll() is None:  # this repetition ran entirely beside the prune
            rates.append(rate[0])
    seconds = time.perf_counter() - started
    out, err = prune.communicate()
    if prune.returncode != 0:
        raise RuntimeError(f"durable_prune failed ({prune.returncode}):\n{(out + err)[-3000:]}")
    return json.loads(out), rates, seconds


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _result(args: argparse.Namespace, measured: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of one run of the benchmark, from what :func:`main` measured."""
    alone, overlapping, after = measured["alone"], measured["beside"], measured["after"]
    report, prune_s = measured["report"], measured["prune_s"]
    deleted, rows = report["total"], sum(report["rows"].values())
    ratio = statistics.median(overlapping) / statistics.median(alone) if overlapping else None
    return {
        "started_at": measured["started_at"].isoformat(),
        "runs": args.runs,
        "checkpoints_per_run": args.checkpoints,
        "retention_batch": measured["batch"],
        "fixture_seconds": round(measured["fixture_s"], 1),
        "w1": {
            "mode": args.mode,
            "workflows": args.w1_workflows,
            "alone_workflows_per_s": alone,
            "beside_workflows_per_s": overlapping,
            "after_workflows_per_s": after,
            "alone_median": _median(alone),
            "beside_median": _median(overlapping),
            "after_median": _median(after),
            "ratio_beside_alone": round(ratio, 3) if ratio is not None else None,
        },
        "prune": {
            "fast": args.fast,
            "deleted_runs": deleted,
            "deleted_rows": rows,
            "batches": report["batches"],
            "busy_seconds": report["busy_seconds"],
            "seconds": round(prune_s, 1),
            "runs_per_s": round(deleted / prune_s, 1),
            "rows_per_s": round(rows / prune_s, 1),
        },
        "loadavg_1m": measured["load"],
        "cores": os.cpu_count(),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--mode", choices=["signal", "caller"], default="signal")
    parser.add_argument("--w1-workflows", type=int, default=200)
    parser.add_argument("--w1-reps", type=int, default=5)
    parser.add_argument("--fast", action="store_true", help="durable_prune --fast: no rest between batches")
    parser.add_argument("--out", default=str(RESULTS))
    return parser


def main() -> None:
    args = _parser().parse_args()
    _recreate_database()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from durable.runtime import get_engine

    started_at = datetime.now(UTC)
    m: dict[str, Any] = {"started_at": started_at, "batch": get_engine().settings.retention_batch}
    m["fixture_s"] = build_fixture(args.runs, args.checkpoints, started_at - timedelta(days=60))
    print(f"fixture: {args.runs:,} runs x {args.checkpoints} checkpoints in {m['fixture_s']:.1f} s", flush=True)
    m["alone"] = w1(args, args.w1_reps, 20)
    print(f"workload 1 alone: {_median(m['alone'])} workflows/s", flush=True)
    load_before = os.getloadavg()[0]
    m["report"], m["beside"], m["prune_s"] = beside(args)
    m["load"] = {"before_prune": round(load_before, 2), "after_prune": round(os.getloadavg()[0], 2)}
    m["after"] = w1(args, args.w1_reps, 5)
    result = _result(args, m)
    prune, w = result["prune"], result["w1"]
    print(
        f"prune: {prune['deleted_runs']:,} runs ({prune['deleted_rows']:,} rows) in {prune['seconds']} s = "
        f"{prune['runs_per_s']:,.0f} runs/s; workload 1 alone {w['alone_median']}/s, beside {w['beside_median']}/s "
        f"({len(m['beside'])} reps), ratio {w['ratio_beside_alone']}; after {w['after_median']}/s"
    )
    if not m["beside"]:
        print("WARNING: no repetition of workload 1 ran entirely beside the prune: raise --runs")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"prune-{started_at.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
