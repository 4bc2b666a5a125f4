"""Benchmark: signal fan-in, a benchmark, not a timed test.

    python -m bench.fanin                                   # 1,000 runs, 4 sending threads, both executors
    python -m bench.fanin --runs 100 --executors worker      # a quick try

``--runs`` runs each wait on signal ``go``; once all of them are suspended
on it, ``--threads`` threads send one signal to each run (``durable.signal``)
and the time to send them all is taken, then the time until the last run
completed (the latest ``finished_at``, written by the engine, from the first
send). The issue's target: all runs complete within 1.5x the send time.

Executors (``--executors``, comma separated):

``inline``  the default deployment without Celery: ``TRANSPORT`` ``inline``, so each
            ``durable.signal`` dispatches the run's turn to the sending process's
            own pool (``WORKER_THREADS`` threads of this process).
``worker``  the senders dispatch nothing (``TRANSPORT`` ``manual``) and ``--workers``
            ``durable_worker`` processes take the woken runs from the database
            (their due-run sweep claims a page at a time; with ``NOTIFY`` on, the
            default, each signal's commit wakes a listening worker at once).

Also reported: the statements of one signal-taking turn as this process runs
it (lease, history, the signal's read, the commit; counted on this thread's
connection), and the write transactions per signal during the fan-in (the
sender's, the turn's and the workers' sweeps; from the server's next
transaction id, so cluster-wide: on a shared server other databases' writers
count too). The machine's load average is recorded before and
after each executor. Results go to ``bench/results/fanin-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DB = os.environ.get("BENCH_FANIN_DB", "postgres://postgres@127.0.0.1:5432/bench_fanin")
os.environ["DATABASE_URL"] = DB
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
WORKFLOW = "bench_fanin"


def _recreate_database() -> None:
    import psycopg

    from bench.common import admin_url, db_name

    with psycopg.connect(admin_url(DB), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name(DB)}"')
        conn.execute(f'CREATE DATABASE "{db_name(DB)}"')


def _settings(transport: str, threads: int) -> dict[str, Any]:
    return {"TRANSPORT": transport, "EMBEDDED_WORKER": False, "WORKER_THREADS": threads}


class Workers:
    """``durable_worker`` processes of this benchmark (each in its own process group, stopped at the end)."""

    def __init__(self, count: int, threads: int, log_dir: Path) -> None:
        self.popens: list[subprocess.Popen[bytes]] = []
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DATABASE_URL": DB,
            "BENCH_TRANSPORT": "inline",
            "BENCH_WORKER_THREADS": str(threads),
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
        }
        self.logs = [log_dir / f"fanin-worker-{i}.log" for i in range(count)]
        for log in self.logs:
            self.popens.append(
                subprocess.Popen(
                    [sys.executable, "-m", "django", "durable_worker"],
                    env=env,
                    cwd=REPO,
                    stdout=log.open("wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        from bench.common import wait_for

        for popen, log in zip(self.popens, self.logs, strict=True):
            wait_for(
                lambda log=log, popen=popen: "running" in log.read_text() or popen.poll() is not None, "worker", 120
            )
            if popen.poll() is not None:
                raise SystemExit(f"durable_worker exited with {popen.returncode}; see {log}")

    def stop(self) -> None:
        for popen in self.popens:
            if popen.poll() is None:
                os.killpg(popen.pid, signal.SIGTERM)
        for popen in self.popens:
            try:
                popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=30)


def _count(ids: list[str], **where: Any) -> int:
    from durable.models import Run

    return Run.objects.filter(id__in=ids, **where).count()


def _wait(ids: list[str], what: str, timeout: float, **where: Any) -> None:
    from bench.common import wait_for

    wait_for(lambda: _count(ids, **where) == len(ids), what, timeout, interval=0.02)


def _send(ids: list[str], threads: int) -> float:
    """Signal every run from ``threads`` threads (each its own connection); seconds from the first send."""
    from django.db import connection

    import durable

    barrier = threading.Barrier(threads + 1)
    errors: list[Exception] = []

    def sender(mine: list[str]) -> None:
        try:
            barrier.wait()
            for run_id in mine:
                durable.signal(run_id, "go", {"to": run_id})
        except Exception as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)
        finally:
            connection.close()

    pool = [threading.Thread(target=sender, args=(ids[i::threads],)) for i in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def fan_in(executor: str, runs: int, threads: int, workers: int, worker_threads: int) -> dict[str, Any]:
    from django.db import connection
    from django.test import override_settings

    import durable
    from bench.common import next_xid
    from durable.models import Run, SignalWaiter

    with connection.cursor() as cursor:  # a table of this executor's runs only
        cursor.execute(f"TRUNCATE {Run._meta.db_table} CASCADE")
    load_before = os.getloadavg()
    pool = Workers(workers, worker_threads, Path(tempfile.mkdtemp(prefix="fanin-"))) if executor == "worker" else None
    transport = "inline" if executor == "inline" else "manual"
    try:
        with override_settings(DURABLE=_settings(transport, worker_threads)):
            ids = [durable.start(WORKFLOW, run_id=f"{executor}-{i}") for i in range(runs)]
            _wait(ids, "the runs to wait on their signal", 600, status="suspended")
            if SignalWaiter.objects.filter(run_id__in=ids).count() != runs:
                raise SystemExit("not every run waits on its signal")
            xid_before = next_xid(DB)
            wall_start = datetime.now(UTC)
            sent = _send(ids, threads)
            _wait(ids, "the runs to complete", 600, status="completed")
            last = max(Run.objects.filter(id__in=ids).values_list("finished_at", flat=True))
            writes = next_xid(DB) - xid_before
        if executor == "inline":
            from durable.runtime import get_engine

            get_engine().transport.shutdown(wait=True)
    finally:
        if pool is not None:
            pool.stop()
    completed = (last - wall_start).total_seconds()
    return {
        "executor": executor,
        "runs": runs,
        "sending_threads": threads,
        "workers": workers if executor == "worker" else 0,
        "worker_threads": worker_threads,
        "sent_s": round(sent, 3),
        "signals_per_s": round(runs / sent, 1),
        "all_completed_s": round(completed, 3),
        "ratio": round(completed / sent, 3),
        "target_ratio": 1.5,
        "met": completed <= 1.5 * sent,
        # cluster-wide: on a shared server other databases' writers count too
        "write_transactions_per_signal": round(writes / runs, 2),
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def statements_per_turn(turns: int) -> dict[str, Any]:
    """Statements of a signal-taking turn that completes its run, run in this thread (manual transport)."""
    from django.db import connection
    from django.test import override_settings

    import durable
    from durable.runtime import get_engine

    seen: list[tuple[str, bool]] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql.split(None, 1)[0].upper(), connection.in_atomic_block))
        return execute(sql, params, many, context)

    per_turn: list[int] = []
    with override_settings(DURABLE=_settings("manual", 1)):
        engine = get_engine()
        for i in range(turns + 1):  # the first warms the registry and the connection
            run_id = durable.start(WORKFLOW, run_id=f"count-{i}")
            engine.run_turn(run_id)
            durable.signal(run_id, "go", i)
            seen.clear()
            with connection.execute_wrapper(count):
                engine.run_turn(run_id)
            if durable.get_run(run_id).status != "completed":
                raise SystemExit(f"run {run_id} did not complete")
            if i:
                per_turn.append(len(seen))
    return {
        "turns": turns,
        "statements_per_turn": sum(per_turn) / len(per_turn),
        "last_turn": [kind for kind, _ in seen],
        "in_transaction": sum(1 for _, in_txn in seen if in_txn),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4, help="sending threads")
    parser.add_argument("--executors", default="inline,worker")
    parser.add_argument("--workers", type=int, default=2, help="durable_worker processes (executor worker)")
    parser.add_argument("--worker-threads", type=int, default=4, help="WORKER_THREADS of whoever runs the turns")
    parser.add_argument("--count-turns", type=int, default=20)
    args = parser.parse_args()
    executors = [name for name in args.executors.split(",") if name]
    if not set(executors) <= {"inline", "worker"}:
        parser.error("--executors takes inline and/or worker")
    _recreate_database()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    RESULTS.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "benchmark": "fanin",
        "cores": os.cpu_count(),
        "load_start": os.getloadavg(),
        "turn": statements_per_turn(args.count_turns),
        "fan_in": [fan_in(e, args.runs, args.threads, args.workers, args.worker_threads) for e in executors],
    }
    report["load_end"] = os.getloadavg()
    report["noisy"] = max(report["load_start"][0], report["load_end"][0]) > (os.cpu_count() or 1)
    if report["noisy"]:
        sys.stderr.write("WARNING: the load average exceeds the cores: these figures are noisy\n")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"fanin-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write(f"\nwritten to {out}\n")


if __name__ == "__main__":
    main()
