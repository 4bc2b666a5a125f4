"""Benchmark: retention pruning 1,000,000 finished runs (10 checkpoints each) beside workload 1.

    python -m bench.prune                                   # 1,000,000 runs, PostgreSQL database bench_prune
    python -m bench.prune --runs 20000 --w1-workflows 20 --w1-reps 2     # try the harness
    python -m bench.prune --reuse --pairs 12      # what is left of the last fixture, 12 pairs, then stop

``--pairs N`` stops the prune after N pairs (pairing pauses the prune half
the time: the paced prune of 1,000,000 runs would take over an hour); what
it deleted is then counted in the tables (the fixture's rows before and
after). With ``--finish`` the prune is not stopped but runs to its end, with
workload 1 repeated beside it (unpaired, reported apart). ``--reuse`` keeps the database and what is
left of its fixture instead of building it again.

Three phases on one database (``bench_prune``, dropped and created again):

1. **Fixture**: ``--runs`` runs ``completed`` 60 days ago, each with
   ``--checkpoints`` checkpoints, inserted by ``INSERT ... SELECT`` over
   ``generate_series`` from one template row per table (every column as the
   ORM writes it), then ``ANALYZE``.
2. **Workload 1 before**: ``python -m bench.ours inproc`` (3 local steps per
   workflow, ``--mode`` signal or caller), ``--w1-reps`` repetitions, with the
   fixture in place.
3. **Beside the prune, paired**: ``manage.py durable_prune --json`` in its own
   process deletes every expired run (``RETENTION_BATCH`` per transaction,
   resting three times each batch's time between batches, as the sweep does;
   ``--fast``: flat out). Meanwhile workload 1 runs in pairs of repetitions:
   one with the prune paused (SIGSTOP, once its statement in the server has
   ended), one beside it (SIGCONT), in alternating order, so both sides of a
   pair see the same tables and the same machine. Then workload 1 once more
   alone, on the pruned tables.

Reported (printed, and written to ``bench/results/prune-<timestamp>.json``):
workload 1's workflows/s alone and beside, the **paired ratio** beside/alone
(median, min, max of the pairs; the issue asks for at least 0.8) and the ratio
of medians, the prune's rate in runs/s and rows/s over its running (not
paused) time, and the load average, flagged noisy above the cores. Run it on a
quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.pairing import noisy, ratios

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


def _idle(app: str) -> None:
    """Wait until the prune's database session runs no statement (it was paused mid-batch)."""
    import psycopg

    with psycopg.connect(DB.replace("postgres://", "postgresql://"), autocommit=True) as conn:
        for _ in range(600):
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'active'", [app]
            ).fetchone()
            if not row or not row[0]:
                return
            time.sleep(0.05)


def beside(args: argparse.Namespace) -> dict[str, Any]:
    """Start the prune; pairs of workload 1 repetitions, one with the prune paused, one beside it.

    The prune process is paused with SIGSTOP (after its current statement ends
    in the server) for the "alone" repetition of each pair and resumed with
    SIGCONT for the "beside" one; the order inside a pair alternates. Both
    repetitions of a pair run on the same tables, so the pair's ratio measures
    the prune and nothing else. A pair whose "beside" repetition outlived the
    prune is dropped.
    """
    app = f"bench-prune-{os.getpid()}"
    cmd = [sys.executable, "manage.py", "durable_prune", "--json", *(["--fast"] if args.fast else [])]
    started = time.perf_counter()
    prune = subprocess.Popen(
        cmd, env=_env(PGAPPNAME=app), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    alone: list[float] = []
    with_prune: list[float] = []
    paused = 0.0
    pair = 0
    while prune.poll() is None and (args.pairs is None or len(alone) < args.pairs):
        measured: dict[str, float] = {}
        for side in ("alone", "beside") if pair % 2 == 0 else ("beside", "alone"):
            if side == "alone" and prune.poll() is None:
                stopped = time.perf_counter()
                prune.send_signal(signal.SIGSTOP)
                _idle(app)
                measured["alone"] = w1(args, 1, 3)[0]
                prune.send_signal(signal.SIGCONT)
                paused += time.perf_counter() - stopped
            elif side == "beside" and prune.poll() is None:
                rate = w1(args, 1, 3)[0]
                if prune.poll() is None:  # this repetition ran entirely beside the prune
                    measured["beside"] = rate
        if len(measured) == 2:
            alone.append(measured["alone"])
            with_prune.append(measured["beside"])
        pair += 1
    tail: list[float] = []
    while args.finish and prune.poll() is None:  # unpaired from here: the prune runs to its end
        rate = w1(args, 1, 3)[0]
        if prune.poll() is None:
            tail.append(rate)
    stopped_early = prune.poll() is None
    if stopped_early:  # --pairs reached: the prune is stopped; what it deleted is counted in the tables
        prune.terminate()
    out, err = prune.communicate()
    seconds = time.perf_counter() - started
    if prune.returncode != 0 and not stopped_early:
        raise RuntimeError(f"durable_prune failed ({prune.returncode}):\n{(out + err)[-3000:]}")
    report = None if stopped_early else json.loads(out)
    return {
        "report": report, "alone": alone, "beside": with_prune, "beside_unpaired": tail,
        "prune_s": seconds, "paused_s": paused,
    }  # fmt: skip


def count_rows() -> dict[str, int]:
    """The fixture's rows left in the tables a prune deletes from (exact counts; workload 1's runs not counted)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM durable_run WHERE id LIKE 'old-%%'")
        runs = int(cursor.fetchone()[0])
        cursor.execute("SELECT count(*) FROM durable_checkpoint WHERE run_id LIKE 'old-%%'")
        return {"durable_run": runs, "durable_checkpoint": int(cursor.fetchone()[0])}


def _r(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _result(args: argparse.Namespace, measured: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of one run of the benchmark, from what :func:`main` measured."""
    prune_s, paused_s = measured["prune_s"], measured["paused_s"]
    before, after = measured["rows_before"], measured["rows_after"]
    deleted = before["durable_run"] - after["durable_run"]
    rows = sum(before.values()) - sum(after.values())
    report = measured["report"] or {"batches": None, "busy_seconds": None}
    running_s = max(prune_s - paused_s, 1e-9)
    paired = ratios(measured["beside"], measured["alone"], higher_is_better=True)
    return {
        "started_at": measured["started_at"].isoformat(),
        "runs": args.runs,
        "checkpoints_per_run": args.checkpoints,
        "retention_batch": measured["batch"],
        "fixture_seconds": round(measured["fixture_s"], 1) if measured["fixture_s"] is not None else None,
        "fixture_reused": measured["fixture_s"] is None,
        "w1": {
            "mode": args.mode,
            "workflows": args.w1_workflows,
            "before_workflows_per_s": measured["before"],
            "alone_workflows_per_s": measured["alone"],
            "beside_workflows_per_s": measured["beside"],
            "after_workflows_per_s": measured["after"],
            "beside_unpaired_workflows_per_s": measured["beside_unpaired"],
            "beside_unpaired_median": _median(measured["beside_unpaired"]),
            "before_median": _median(measured["before"]),
            "alone_median": _median(measured["alone"]),
            "beside_median": _median(measured["beside"]),
            "after_median": _median(measured["after"]),
            "pairs": len(measured["beside"]),
            "beside_vs_alone_paired": paired["paired"],
            "beside_vs_alone_of_medians": paired["of_medians"],
        },
        "prune": {
            "fast": args.fast,
            "finished": measured["report"] is not None,
            "runs_before": before["durable_run"],
            "deleted_runs": deleted,
            "deleted_rows": rows,  # runs and checkpoints (counted in the tables)
            "batches": report["batches"],
            "busy_seconds": report["busy_seconds"],
            "seconds": round(prune_s, 1),
            "paused_seconds": round(paused_s, 1),
            "runs_per_s": round(deleted / running_s, 1),
            "rows_per_s": round(rows / running_s, 1),
        },
        "load": measured["load"],
        "noisy": measured["noisy"],
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
    parser.add_argument(
        "--pairs", type=int, default=None, help="stop the prune after this many pairs (default: when it ends)"
    )
    parser.add_argument(
        "--finish", action="store_true", help="with --pairs: then let the prune end, workload 1 beside it unpaired"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep the database and what is left of its fixture (no rebuild)"
    )
    parser.add_argument("--out", default=str(RESULTS))
    return parser


def main() -> None:
    args = _parser().parse_args()
    if not args.reuse:
        _recreate_database()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from durable.runtime import get_engine

    started_at = datetime.now(UTC)
    m: dict[str, Any] = {"started_at": started_at, "batch": get_engine().settings.retention_batch, "fixture_s": None}
    if not args.reuse:
        m["fixture_s"] = build_fixture(args.runs, args.checkpoints, started_at - timedelta(days=60))
        print(f"fixture: {args.runs:,} runs x {args.checkpoints} checkpoints in {m['fixture_s']:.1f} s", flush=True)
    m["rows_before"] = count_rows()
    print(f"tables: {m['rows_before']}", flush=True)
    m["before"] = w1(args, args.w1_reps, 20)
    print(f"workload 1 before the prune: {_median(m['before'])} workflows/s", flush=True)
    load_before = os.getloadavg()[0]
    m.update(beside(args))
    m["rows_after"] = count_rows()
    load_after = os.getloadavg()[0]
    m["load"] = {"before_prune": round(load_before, 2), "after_prune": round(load_after, 2)}
    m["noisy"] = noisy([load_before, load_after], os.cpu_count() or 1)
    m["after"] = w1(args, args.w1_reps, 5)
    result = _result(args, m)
    prune, w = result["prune"], result["w1"]
    pr = w["beside_vs_alone_paired"]
    print(
        f"prune{'' if prune['finished'] else ' (stopped)'}: {prune['deleted_runs']:,} of {prune['runs_before']:,} "
        f"runs ({prune['deleted_rows']:,} rows) in {prune['seconds']} s "
        f"({prune['paused_seconds']} s of it paused) = {prune['runs_per_s']:,.0f} runs/s, "
        f"{prune['rows_per_s']:,.0f} rows/s while running; workload 1 in {w['pairs']} pairs: alone "
        f"{w['alone_median']}/s, beside {w['beside_median']}/s, paired beside/alone {_r(pr.get('median'))} "
        f"(min {_r(pr.get('min'))}, max {_r(pr.get('max'))}); "
        f"before {w['before_median']}/s, after {w['after_median']}/s; beside unpaired "
        f"{w['beside_unpaired_median']}/s ({len(m['beside_unpaired'])} reps)"
    )
    if result["noisy"]:
        print("WARNING: the load average exceeded the cores: these figures are not conclusive")
    if not m["beside"]:
        print("WARNING: no pair of workload 1 repetitions ran entirely beside the prune: raise --runs")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"prune-{started_at.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
