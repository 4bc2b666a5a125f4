"""Benchmark: the server's time for the writes every wake makes to a run row, by the runs table's indexes.

    python -m bench.run_writes                      # 100,000 runs, 5 pairs, database bench_run_writes
    python -m bench.run_writes --runs 20000 --pairs 3

Its own database (``bench_run_writes``, dropped and created, migrated). Each
repetition empties the runs table, inserts ``--runs`` suspended runs (as
sleepers leave them), analyses it, then times two phases on the server, in
pages of 100 runs by id, each page one statement, inside one ``DO`` block (so
no client round trip is counted):

- **claim**: ``suspended`` → ``running`` with a lease, as a worker's page claim writes it;
- **complete**: ``running`` → ``completed`` with the output, as a page's commit writes it.

Two tables are measured in alternation (the order alternating by pair):
``current``, the runs table as the migrations leave it, and ``before_0024``,
the same with the two indexes migration 0024 removed put back (the full
GIN on ``tags`` and the ``varchar_pattern_ops`` index on ``id``). Reported:
microseconds of server time per run for each phase and both, each side's
median with min/max, and the paired ratio ``before_0024 ÷ current`` (above
1.0: the current table is cheaper to write). A wake writes its run at least
these two times, so their sum is a floor of the server time a wake costs.

Written to ``bench/results/run-writes-<UTC time>.json`` with the machine,
the load before and after every repetition, and ``"noisy": true`` when it
exceeded the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import pg_url, summary
from bench.harness import reset_database
from bench.pairing import noisy, ratios

DB = os.environ.get("BENCH_RUN_WRITES_DB", "postgres://postgres@127.0.0.1:5432/bench_run_writes")
os.environ["DATABASE_URL"] = DB
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
OLD_INDEXES = (
    "CREATE INDEX bench_old_tags_gin ON durable_run USING gin (tags jsonb_path_ops)",
    "CREATE INDEX bench_old_id_like ON durable_run (id varchar_pattern_ops)",
)
FILL = (
    "INSERT INTO durable_run (id, workflow, version, status, namespace, input, wake_at, recovery_attempts, tags, "
    "search_attributes, priority, created_at, updated_at, started_at, cancel_requested, patches, query_values, "
    "lifecycle, lifecycle_owed, turns, awaited) SELECT 'sleeper-' || g, 'bench_sleeper', 1, 'suspended', 'default', "
    "'[1765000000.0]', now(), 0, '[]', '{}', 0, now(), now(), now(), false, '{}', '{}', '{}', false, 1, false "
    "FROM generate_series(1, %s) g"
)
PHASES = {
    "claim": (
        "UPDATE durable_run SET status = 'running', locked_by = 'bench-worker', locked_until = now() + "
        "interval '30 seconds', updated_at = now(), turns = turns + 1"
    ),
    "complete": (
        "UPDATE durable_run SET status = 'completed', locked_by = NULL, locked_until = NULL, updated_at = now(), "
        "finished_at = now(), output = '1765000000.0'"
    ),
}


def _url() -> str:
    return pg_url(DB)


def _recreate() -> None:
    reset_database(DB)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _set_table(conn: psycopg.Connection[Any], side: str) -> None:
    conn.execute("DROP INDEX IF EXISTS bench_old_tags_gin")
    conn.execute("DROP INDEX IF EXISTS bench_old_id_like")
    if side == "before_0024":
        for sql in OLD_INDEXES:
            conn.execute(sql)


def _phase(conn: psycopg.Connection[Any], sql: str, runs: int) -> float:
    """Server microseconds per run of ``sql`` over every run, a page of 100 ids per statement."""
    pages = (runs - 1) // 100
    block = (
        f"DO $$ DECLARE i int; BEGIN FOR i IN 0..{pages} LOOP "
        f"{sql} WHERE id = ANY (SELECT 'sleeper-' || g FROM generate_series(i * 100 + 1, i * 100 + 100) g); "
        "END LOOP; END $$"
    )
    started = time.perf_counter()
    conn.execute(block)
    return (time.perf_counter() - started) * 1e6 / runs


def measure(side: str, runs: int) -> dict[str, Any]:
    with psycopg.connect(_url(), autocommit=True) as conn:
        conn.execute("TRUNCATE durable_run CASCADE")
        _set_table(conn, side)
        conn.execute(FILL, [runs])
        conn.execute("VACUUM ANALYZE durable_run")
        conn.execute("CHECKPOINT")  # each repetition starts with no dirty pages left by the one before
        out: dict[str, Any] = {name: round(_phase(conn, sql, runs), 2) for name, sql in PHASES.items()}
    out["both"] = round(out["claim"] + out["complete"], 2)
    out["load_1m"] = round(os.getloadavg()[0], 2)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    _recreate()
    started = datetime.now(UTC)
    sides: dict[str, list[dict[str, Any]]] = {"current": [], "before_0024": []}
    for pair in range(args.pairs):
        order = ("current", "before_0024") if pair % 2 == 0 else ("before_0024", "current")
        for side in order:
            sides[side].append(measure(side, args.runs))
            print(side, sides[side][-1], file=sys.stderr)
    report: dict[str, Any] = {
        "benchmark": "run_writes",
        "runs": args.runs,
        "pairs": args.pairs,
        "cores": os.cpu_count(),
        "unit": "server microseconds per run",
    }
    for phase in ("claim", "complete", "both"):
        cur = [r[phase] for r in sides["current"]]
        old = [r[phase] for r in sides["before_0024"]]
        report[phase] = {
            "current": summary(cur),
            "before_0024": summary(old),
            "before_0024_over_current": ratios(cur, old, higher_is_better=False),
        }
    loads = [r["load_1m"] for side in sides.values() for r in side]
    report["load_1m"] = summary(loads)
    report["noisy"] = noisy(loads, os.cpu_count() or 1)
    report["raw"] = sides
    with psycopg.connect(_url(), autocommit=True) as conn:
        report["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"run-writes-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    if report["noisy"]:
        print("WARNING: the load average exceeded the cores: these figures are noisy", file=sys.stderr)
    for phase in ("claim", "complete", "both"):
        r = report[phase]
        paired = r["before_0024_over_current"]["paired"]
        print(
            f"{phase:9} current {r['current']['median']:.1f} µs [{r['current']['min']:.1f}-{r['current']['max']:.1f}]"
            f"  before 0024 {r['before_0024']['median']:.1f} µs"
            f"  paired before/current {paired['median']:.3f} [{paired['min']:.3f}-{paired['max']:.3f}]"
        )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
