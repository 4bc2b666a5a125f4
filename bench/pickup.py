"""Benchmark: first-turn latency of a run started from another process, with NOTIFY on and off.

    bench/.venv/bin/python -m bench.pickup                     # 50 starts with NOTIFY, 10 without
    bench/.venv/bin/python -m bench.pickup --starts 20 --off-starts 4   # a quick try

This process is a web process: the manual transport, so ``durable.start()``
only inserts the run. One ``durable_worker`` (the inline transport, polling
every ``--interval`` seconds, 5 by default) runs it. Each start waits for the
previous run to complete and then a pause: ``--settle`` seconds (the worker's
pass after a run has ended) plus a random part, up to ``--gap`` with NOTIFY
and up to a whole interval without, so starts fall at every moment of the
worker's poll cycle.

The latency of a start is the run's ``started_at`` (written by the worker's
claim) minus its ``created_at`` (taken by ``durable.start`` just before its
insert): both are read from the database and come from the same machine's
clock. Reported per mode: p50, p90, min and max in ms, the target (p50 at most
50 ms with NOTIFY) and the load average before and after; ``"noisy": true``
when the load exceeded the cores. Writes ``bench/results/pickup-<UTC time>.json``.

The database (``BENCH_PICKUP_DB``, default ``bench_pickup`` on the local
server) is dropped and created again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DB = os.environ.get("BENCH_PICKUP_DB", "postgres://postgres@127.0.0.1:5432/bench_pickup")
os.environ["DATABASE_URL"] = DB
os.environ["BENCH_TRANSPORT"] = "manual"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
REPO = Path(__file__).resolve().parent.parent
TARGET_P50_MS = 50.0
LISTENING = 'LISTEN "durable_work"'


def _recreate_database() -> None:
    import psycopg

    from bench import common

    with psycopg.connect(common.admin_url(DB), autocommit=True) as conn:
        name = common.db_name(DB)
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def _listening() -> bool:
    """Is a session of the benchmark's database in ``LISTEN``? (The worker's listener, once ready.)"""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = %s", [LISTENING]
        )
        return bool(cursor.fetchone()[0])


def _worker(log: Path, interval: float, notify: bool) -> subprocess.Popen[bytes]:
    """A ``durable_worker`` on the inline transport; returns once it polls (and, with NOTIFY, listens)."""
    from bench import common

    env = {**os.environ, "BENCH_TRANSPORT": "inline", "BENCH_NOTIFY": "1" if notify else "0"}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "durable_worker", "--interval", str(interval)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    common.wait_for(lambda: proc.poll() is not None or "running" in log.read_text(errors="replace"), "worker", 120)
    if notify:
        common.wait_for(lambda: proc.poll() is not None or _listening(), "worker listening", 120)
    if proc.poll() is not None:
        raise SystemExit(f"durable_worker exited with {proc.returncode}; see {log}")
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _one(tag: str, i: int, timeout: float) -> float:
    """Start a run, wait until it completes; its first-turn latency in ms (started_at - created_at)."""
    import durable
    from bench import common
    from durable.models import Run

    run_id = durable.start("bench_local", 1, run_id=f"pickup-{tag}-{i}")
    # Polled slowly: the figure comes from the run's own timestamps, and a busy poll would take CPU from the worker.
    common.wait_for(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(), f"{run_id} completed", timeout, 0.05
    )
    created, started = Run.objects.filter(pk=run_id).values_list("created_at", "started_at").get()
    return float((started - created).total_seconds() * 1000)


def _measure(notify: bool, starts: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from django.test.utils import override_settings

    load_before = os.getloadavg()
    proc = _worker(tmp / f"worker-{'on' if notify else 'off'}.log", args.interval, notify)
    tag = f"{'on' if notify else 'off'}-{int(time.time())}"
    latencies: list[float] = []
    try:
        with override_settings(DURABLE={"TRANSPORT": "manual", "EMBEDDED_WORKER": False, "NOTIFY": notify}):
            _one(f"{tag}-warm", 0, args.interval * 4 + 60)  # the worker's first turn: imports, connections
            # Without NOTIFY a start waits for the poll: pauses spread over a whole interval put starts at
            # every moment of the worker's cycle. With it, a pause past the worker's follow-up pass (--settle).
            spread = args.gap if notify else args.interval
            for i in range(starts):
                time.sleep(args.settle + random.uniform(0, spread))
                latencies.append(_one(tag, i, args.interval * 4 + 60))
    finally:
        _stop(proc)
    return _report(notify, latencies, load_before, os.getloadavg())


def _report(notify: bool, ms: list[float], before: tuple[float, ...], after: tuple[float, ...]) -> dict[str, Any]:
    from bench import common

    cores = os.cpu_count() or 1
    p50 = statistics.median(ms)
    out: dict[str, Any] = {
        "notify": notify,
        "starts": len(ms),
        "first_turn_ms": {
            "p50": p50,
            "p90": common.percentile(ms, 90),
            "min": min(ms),
            "max": max(ms),
            "values": ms,
        },
        "load_before": before,
        "load_after": after,
        "cores": cores,
        "noisy": max(before[0], after[0]) > cores,
    }
    if notify:
        out["target"] = {"p50_ms_at_most": TARGET_P50_MS, "met": p50 <= TARGET_P50_MS}
    return out


def _line(result: dict[str, Any]) -> str:
    ms = result["first_turn_ms"]
    mode = "NOTIFY on " if result["notify"] else "NOTIFY off"
    text = (
        f"{mode}: {result['starts']} starts, first turn p50 {ms['p50']:.1f} ms, p90 {ms['p90']:.1f} ms, "
        f"min {ms['min']:.1f} ms, max {ms['max']:.1f} ms"
    )
    if "target" in result:
        text += f" (target p50 <= {TARGET_P50_MS:.0f} ms: {'met' if result['target']['met'] else 'NOT met'})"
    if result["noisy"]:
        text += (
            f"  WARNING: load {max(result['load_before'][0], result['load_after'][0]):.1f} > {result['cores']} cores"
        )
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=50, help="starts measured with NOTIFY on")
    parser.add_argument(
        "--off-starts", type=int, default=10, help="starts measured with NOTIFY off (each waits a poll)"
    )
    parser.add_argument("--interval", type=float, default=5.0, help="the worker's poll interval (seconds)")
    parser.add_argument("--settle", type=float, default=0.5, help="shortest pause between starts (seconds)")
    parser.add_argument("--gap", type=float, default=0.5, help="random part of the pause, NOTIFY on (seconds)")
    args = parser.parse_args(argv)
    if args.starts < 1 or args.off_starts < 0 or args.interval <= 0 or min(args.gap, args.settle) < 0:
        parser.error("--starts must be at least 1, --off-starts at least 0, --interval positive, pauses not negative")
    _recreate_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-pickup-") as tmp:
        results.append(_measure(True, args.starts, args, Path(tmp)))
        print(_line(results[-1]), flush=True)
        if args.off_starts:
            results.append(_measure(False, args.off_starts, args, Path(tmp)))
            print(_line(results[-1]), flush=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = REPO / "bench" / "results" / f"pickup-{stamp}.json"
    method = (
        "first-turn latency = run.started_at (the worker's claim) - run.created_at (durable.start), one run "
        f"in flight; pause between starts {args.settle}s + uniform(0, {args.gap}s) with NOTIFY, "
        f"+ uniform(0, {args.interval}s) without; one durable_worker, inline transport, --interval "
        f"{args.interval}; the starter on the manual transport"
    )
    path.write_text(json.dumps({"workload": "pickup", "method": method, "results": results}, indent=2) + "\n")
    print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
