"""The chaos suite's driver: ``python -m tests.chaos.driver {chaos,soak} [options] --out FILE``.

It starts a PostgreSQL cluster and a redis-server of its own (on free ports, in a
temporary directory; the machine's shared servers are never touched), migrates,
starts the processes of :mod:`tests.chaos.fleet`, runs the workload with its
faults (``chaos``) or at a steady rate (``soak``), verifies the tables
(:mod:`tests.chaos.verify`), prints its figures and writes them as JSON to
``--out``. Exit status 0 only if every check held. ``tests/chaos/test_chaos.py``
runs it under pytest; ``scripts/chaos`` is the command to use.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MODES = {  # runs, seconds over which they are started, times each fault kind is injected
    "short": {"runs": 120, "window": 60.0, "repeat": 1},
    "long": {"runs": 500, "window": 240.0, "repeat": 3},
}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.driver", description=__doc__)
    parser.add_argument("what", choices=["chaos", "soak"])
    parser.add_argument("--mode", choices=list(MODES), default="short", help="chaos: size of the run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=None, help="chaos: override the mode's number of runs")
    parser.add_argument(
        "--fleet", choices=["mixed", "celery"], default="mixed", help="celery: no durable_worker processes"
    )
    parser.add_argument("--window", type=float, default=None, help="chaos: override the seconds runs start over")
    parser.add_argument("--exclude", default="", help="chaos: fault kinds not to inject, comma-separated")
    parser.add_argument("--minutes", type=float, default=10.0, help="soak: how long to start runs")
    parser.add_argument("--rate", type=float, default=2.0, help="soak: runs started per second")
    parser.add_argument(
        "--durable", default="{}", help='DURABLE options on top of the suite\'s, as JSON: \'{"STEP_LEASE": "10s"}\''
    )
    parser.add_argument("--out", type=Path, required=True, help="the JSON report")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    return parser.parse_args(argv)


def services(tmp: Path) -> tuple[Any, Any, str]:
    """Our own PostgreSQL cluster and redis-server; returns them and the database URL."""
    import psycopg

    from bench.common import PrivatePostgres, PrivateRedis

    pgroot = tmp / "pgroot"
    pgroot.mkdir()
    tmp.chmod(0o755)  # the server runs as user postgres when we are root: it must reach its directory
    pg = PrivatePostgres(pgroot, pgss=False, max_connections=300)
    redis = PrivateRedis(tmp)
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{pg.port}/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE chaos")
    return pg, redis, f"{pg.url}/chaos"


def setup_django(db_url: str, broker: str, durable: str) -> None:
    from tests.integration.common import BROKER_ENV, SESSION_ENV, SETTINGS_ENV

    os.environ.update(
        DATABASE_URL=db_url,
        DJANGO_SETTINGS_MODULE="tests.chaos.settings",
        **{BROKER_ENV: broker, SESSION_ENV: f"chaos-{os.getpid()}", SETTINGS_ENV: durable},
    )
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from tests.chaos.workflows import EXECUTIONS_DDL
    from tests.integration.celery_app import app

    call_command("migrate", verbosity=0)
    with connection.cursor() as cur:
        cur.execute(EXECUTIONS_DDL)
    app.set_current()
    app.set_default()


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str]) -> int:
    args = parse(argv)
    tmp = Path(tempfile.mkdtemp(prefix="durable-chaos-"))
    report: dict[str, Any] = {"what": args.what, "seed": args.seed, "started": datetime.now(UTC).isoformat()}
    report["machine_at_start"] = machine()
    t0 = time.monotonic()
    pg = redis = cluster = None
    try:
        pg, redis, db_url = services(tmp)
        setup_django(db_url, redis.url, args.durable)
        report["durable_options"] = json.loads(args.durable)
        from tests.chaos.fleet import ChaosCluster

        procs = tmp / "procs"
        procs.mkdir()
        cluster = ChaosCluster(procs, redis.url, json.loads(args.durable))
        cluster.start_all(args.fleet)
        report["fleet"] = args.fleet
        if args.what == "chaos":
            from tests.chaos.scenario import run_chaos

            mode = {**MODES[args.mode], **({"window": args.window} if args.window else {})}
            report.update(run_chaos(args, cluster, pg, redis, mode))
        else:
            from tests.chaos.soak import run_soak

            report.update(run_soak(args, cluster))
    except BaseException as exc:
        report.setdefault("failures", []).append(f"driver error: {exc!r}")
        report["traceback"] = traceback.format_exc()
    finally:
        if cluster is not None:
            report["process_logs"] = str(tmp / "procs")
            cluster.close()
        for server in (redis, pg):
            if server is not None:
                server.stop()
    report["machine_at_end"] = machine()
    report["duration_s"] = round(time.monotonic() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print_report(report)
    print(f"\nreport: {args.out}")
    if not args.keep and not report.get("failures"):
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if report.get("failures") else 0


def print_report(report: dict[str, Any]) -> None:
    skip = {"faults", "samples", "failures", "traceback"}
    print(f"\n== chaos suite: {report['what']} (seed {report['seed']})")
    for key, value in report.items():
        if key not in skip:
            print(f"{key}: {json.dumps(value, default=str)}")
    for sample in report.get("samples", []):
        print(f"sample: {json.dumps(sample)}")
    for fault in report.get("faults", []):
        print(f"fault: {json.dumps(fault)}")
    for failure in report.get("failures", [])[:50]:
        print(f"FAILED: {failure}")
    if report.get("traceback"):
        print(report["traceback"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
