"""Benchmark: entity operations per second, on one hot key and on one key per thread (not a timed test).

    python -m bench.entities                        # 4 threads x 500 ops, PostgreSQL database bench_entities
    python -m bench.entities --threads 8 --ops 200

Two figures, each with its own threads and database connections:

1. **One key**: every thread applies ``--ops`` operations to the same key, so
   they queue on its row lock; the rate is that of one key.
2. **A key per thread**: the same, each thread on its own key (row locks of
   different rows: in parallel).

Reported per figure: operations per second (wall clock, from the threads'
start to the last commit) and SQL statements per operation (Django's, from an
``execute_wrapper``, transactions' BEGIN/COMMIT not included). The database
``bench_entities`` is dropped and created again at every run.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

DB = os.environ.get("BENCH_ENTITIES_DB", "postgres://postgres@127.0.0.1:5432/bench_entities")
os.environ["DATABASE_URL"] = DB
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
os.environ.setdefault("BENCH_TRANSPORT", "manual")


def _recreate_database() -> None:
    import psycopg

    base, name = DB.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def _measure(threads: int, ops: int, key_of: Any) -> dict[str, float]:
    """Run ``threads`` threads of ``ops`` calls each (thread ``i`` on key ``key_of(i)``); rate and statements."""
    from django.db import connection, connections

    import durable

    statements = [0] * threads
    barrier = threading.Barrier(threads + 1)

    def body(i: int) -> None:
        def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            statements[i] += 1
            return execute(sql, params, many, context)

        try:
            with connection.execute_wrapper(count):
                barrier.wait()
                for n in range(ops):
                    durable.call_entity("bench_counter", key_of(i), "add", 1, op_id=f"{key_of(i)}-{i}-{n}")
        finally:
            connections.close_all()

    workers = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    total = threads * ops
    return {
        "ops": total,
        "seconds": round(elapsed, 3),
        "ops_per_s": round(total / elapsed, 1),
        "statements_per_op": round(sum(statements) / total, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--ops", type=int, default=500)
    args = parser.parse_args()
    _recreate_database()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import durable

    @durable.entity("bench_counter", initial=0)
    class Counter:
        def add(self, n: int) -> int:
            self.state += n
            return int(self.state)

    result = {
        "threads": args.threads,
        "one_key": _measure(args.threads, args.ops, lambda i: "hot"),
        "key_per_thread": _measure(args.threads, args.ops, lambda i: f"k{i}"),
        "load": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
