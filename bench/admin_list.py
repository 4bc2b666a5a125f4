"""Benchmark: the admin run list and ``GET /api/durable/runs/`` over 1,000,000 runs in PostgreSQL.

Usage::

    .venv/bin/python bench/admin_list.py [--rows 1000000] [--repeat 7] [--database durable_bench]

It creates (or reuses) a scratch database on the server of ``$BENCH_PG``
(default ``postgres://postgres@127.0.0.1:5432``), migrates it, fills
``durable_run`` with one ``INSERT ... SELECT generate_series`` (statuses,
workflows, namespaces, tags and creation times spread like a real table), then
times pages in-process with Django's test client and prints the median of
``--repeat`` requests per page. ``--proposed-indexes`` adds the indexes proposed
for ``Run`` first (and without it they are dropped). Not a test: nothing asserts
on the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKFLOWS = [f"wf_{i}" for i in range(10)]
NAMESPACES = ["default", "team-a", "team-b", "team-c", "team-d"]

# A column per SQL expression of the series number ``g``: deterministic, realistic spread.
# (``mod()``, not ``%``: the statement also carries ``%s`` parameters.)
EXPRESSIONS = {
    "id": "'bench-' || g",
    "workflow": "'wf_' || (mod(g, 10))",
    "version": "1 + (mod(g, 3))",
    "status": """CASE WHEN mod(g, 1000) = 0 THEN 'dead' WHEN mod(g, 100) = 1 THEN 'cancelled'
                 WHEN mod(g, 20) = 2 THEN 'failed' WHEN mod(g, 20) = 3 THEN 'suspended'
                 WHEN mod(g, 50) = 4 THEN 'pending' WHEN mod(g, 200) = 5 THEN 'running' ELSE 'completed' END""",
    "namespace": "(ARRAY['default','team-a','team-b','team-c','team-d'])[1 + mod(g, 5)]",
    "input": "jsonb_build_object('order', g, 'amount', mod(g, 997))",
    "output": "CASE WHEN mod(g, 20) > 3 THEN jsonb_build_object('ok', true) END",
    "tags": "jsonb_build_array('tag-' || (mod(g, 50)))",
    "search_attributes": "'{}'::jsonb",
    "created_at": "now() - make_interval(secs => ({rows} - g) * 2.592)",  # 30 days, newest = highest g
    "updated_at": "now() - make_interval(secs => ({rows} - g) * 2.592) + interval '5 seconds'",
    "started_at": "now() - make_interval(secs => ({rows} - g) * 2.592) + interval '1 second'",
    "finished_at": "CASE WHEN mod(g, 20) > 3 OR mod(g, 20) = 2 THEN now() - make_interval(secs => ({rows} - g) * 2.592)"
    " + interval '5 seconds' END",
}


def setup_django(database: str) -> None:
    server = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432").rstrip("/")
    import psycopg

    with psycopg.connect(server.replace("postgres://", "postgresql://") + "/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database}"')
    os.environ["DATABASE_URL"] = f"{server}/{database}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["DEBUG"] = "False"
    os.environ["ALLOWED_HOSTS"] = "testserver,localhost"
    os.environ["DURABLE_TRANSPORT"] = "manual"
    os.environ["DURABLE_API_THROTTLE_RATE"] = ""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def fill(rows: int) -> None:
    from django.db import connection

    from durable.models import Run

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM durable_run")
        if cursor.fetchone()[0] == rows:
            print(f"reusing {rows:,} runs")
            return
        print(f"inserting {rows:,} runs ...", flush=True)
        started = time.perf_counter()
        cursor.execute("TRUNCATE durable_run CASCADE")
        columns, values, params = [], [], []
        for field in Run._meta.concrete_fields:
            columns.append(f'"{field.column}"')
            if field.name in EXPRESSIONS:
                values.append(EXPRESSIONS[field.name].replace("{rows}", str(rows)))
                continue
            default = field.get_default()
            if field.get_internal_type() == "JSONField":
                values.append("%s::jsonb" if default is not None else "NULL")
                if default is not None:
                    params.append(json.dumps(default))
            else:
                values.append("%s")
                params.append(default)
        select = ", ".join(values)
        sql = f"INSERT INTO durable_run ({', '.join(columns)}) SELECT {select} FROM generate_series(1, {rows}) AS g"
        cursor.execute(sql, params)
    # Outside a transaction block: the steady state autovacuum would reach (visibility map, statistics).
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE durable_run")
    print(f"inserted in {time.perf_counter() - started:.1f}s")


# Indexes proposed for durable.models.Run (not in its migrations yet): the worst cases of
# the list (a workflow+status or tag filter that matches few or no rows) scan without them.
PROPOSED_INDEXES = {
    "durable_run_wf_status_created": "ON durable_run (workflow, status, created_at DESC)",
    "durable_run_tags_gin": "ON durable_run USING gin (tags jsonb_path_ops)",
}


def set_proposed_indexes(enabled: bool) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for name, definition in PROPOSED_INDEXES.items():
            if enabled:
                cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} {definition}")
            else:
                cursor.execute(f"DROP INDEX IF EXISTS {name}")
        cursor.execute("ANALYZE durable_run")
    print(f"proposed indexes: {'on' if enabled else 'off'} ({', '.join(PROPOSED_INDEXES)})")


def measure(client: Any, url: str, repeat: int, **headers: str) -> tuple[float, int, int]:
    response = client.get(url, **headers)  # warm-up (and connection, caches)
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url, **headers)
        timings.append((time.perf_counter() - started) * 1000)
    rows = 0
    if response.get("Content-Type", "").startswith("application/json"):
        rows = len(response.json().get("results", []))
    return statistics.median(timings), response.status_code, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--database", default="durable_bench")
    parser.add_argument(
        "--proposed-indexes",
        action="store_true",
        help="measure with the indexes proposed for Run (see PROPOSED_INDEXES)",
    )
    args = parser.parse_args()
    setup_django(args.database)
    fill(args.rows)
    set_proposed_indexes(args.proposed_indexes)

    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    settings.DURABLE_DASHBOARD = {**settings.DURABLE_DASHBOARD, "SUMMARY_CACHE_SECONDS": 0}  # time the queries
    from rest_framework.authtoken.models import Token

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", "", "bench")
    token, _ = Token.objects.get_or_create(user=user)
    admin = Client()
    admin.force_login(user)
    api = Client()
    auth = {"HTTP_AUTHORIZATION": f"Token {token.key}"}
    newest = f"bench-{args.rows}"
    pages = [
        ("admin list, unfiltered", admin, "/admin/durable/run/", {}),
        ("admin list, status=failed", admin, "/admin/durable/run/?status=failed", {}),
        ("admin list, status=dead (rare)", admin, "/admin/durable/run/?status=dead", {}),
        ("admin list, workflow=wf_3", admin, "/admin/durable/run/?workflow=wf_3", {}),
        ("admin list, namespace=team-a", admin, "/admin/durable/run/?namespace=team-a", {}),
        ("admin list, tag=tag-7", admin, "/admin/durable/run/?tag=tag-7", {}),
        ("admin list, tag=nope (none)", admin, "/admin/durable/run/?tag=nope", {}),
        (
            "admin list, workflow=wf_3&status=failed (none)",
            admin,
            "/admin/durable/run/?workflow=wf_3&status=failed",
            {},
        ),
        ("admin list, created range", admin, "/admin/durable/run/?created_at__gte=2000-01-01&status=failed", {}),
        ("admin list, search by id", admin, f"/admin/durable/run/?q={newest}", {}),
        ("admin list, status=failed, page 20", admin, "/admin/durable/run/?status=failed&p=19", {}),
        ("admin run detail", admin, f"/admin/durable/run/{newest}/change/", {}),
        ("admin summary, 24h (uncached)", admin, "/admin/durable/run/summary/?window=24h", {}),
        ("admin summary, 30d (uncached)", admin, "/admin/durable/run/summary/?window=30d", {}),
        ("API runs/, unfiltered", api, "/api/durable/runs/", auth),
        ("API runs/?status=failed", api, "/api/durable/runs/?status=failed", auth),
        ("API runs/?status=dead", api, "/api/durable/runs/?status=dead", auth),
        ("API runs/?workflow=wf_2&status=failed", api, "/api/durable/runs/?workflow=wf_2&status=failed", auth),
        ("API runs/?workflow=wf_3&status=failed (none)", api, "/api/durable/runs/?workflow=wf_3&status=failed", auth),
        (
            "API runs/?namespace=team-d&status=suspended",
            api,
            "/api/durable/runs/?namespace=team-d&status=suspended",
            auth,
        ),
        ("API runs/?tag=tag-7", api, "/api/durable/runs/?tag=tag-7", auth),
        ("API runs/?tag=nope (none)", api, "/api/durable/runs/?tag=nope", auth),
        ("API runs/?status=failed, next page (cursor)", api, "CURSOR", auth),
        ("API runs/?q=<id>", api, f"/api/durable/runs/?q={newest}", auth),
        ("API runs/{id}/", api, f"/api/durable/runs/{newest}/", auth),
    ]
    first = api.get("/api/durable/runs/?status=failed", **auth).json()
    print(f"\n{'page':48} {'median ms':>10} {'status':>7} {'rows':>5}")
    for label, client, url, headers in pages:
        if url == "CURSOR":
            url = first["next"].split("testserver", 1)[-1]
        median, status, rows = measure(client, url, args.repeat, **headers)
        print(f"{label:48} {median:10.1f} {status:7d} {rows if rows else '':>5}")


if __name__ == "__main__":
    main()
