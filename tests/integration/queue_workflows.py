"""Steps of limited queues for the real-process queue tests (tests/integration/test_queues.py).

Every execution of a step writes its start and end (wall clock, the same on
every process of this machine) to the table :data:`TABLE` of the test
database: one row inserted when it starts, its end written when it returns,
so a step killed mid-way keeps its start with no end. The table is created
by the test (:func:`create_table`), not by a migration.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import connection

import durable

TABLE = "durable_it_queue_exec"
QUEUE_NAMES = ("iq_conc", "iq_key", "iq_rate", "iq_fair", "iq_kill", "iq_flush", "iq_api")
HANG = 120.0


def create_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, queue text, key text, run_id text, "
            "seq int, attempt int, pid int, started double precision, ended double precision)"
        )
        cursor.execute(f"TRUNCATE {TABLE}")


def executions(queue: str) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT key, run_id, seq, attempt, pid, started, ended FROM {TABLE} WHERE queue = %s ORDER BY started",
            [queue],
        )
        names = ("key", "run_id", "seq", "attempt", "pid", "started", "ended")
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _execute(queue: str, key: str | None, hold: Any) -> str:
    info = durable.current_step()
    assert info is not None
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (queue, key, run_id, seq, attempt, pid, started) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
            [queue, key, info.run_id, info.seq, info.attempt, os.getpid(), time.time()],
        )
        row_id = cursor.fetchone()[0]
    if isinstance(hold, str):  # "gate:<path>": hold until the file exists
        deadline = time.monotonic() + HANG
        while not os.path.exists(hold[5:]) and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        time.sleep(hold)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET ended = %s WHERE id = %s", [time.time(), row_id])
    return f"{key}:{info.seq}"


def _key(key: str | None, hold: Any) -> str | None:
    return key


def _make(queue: str) -> Any:
    def step(key: str | None, hold: Any) -> str:
        return _execute(queue, key, hold)

    step.__name__ = queue
    return durable.step(name=f"{queue}.run", queue=queue, key=_key, retries=1, backoff=0)(step)


STEPS = {queue: _make(queue) for queue in QUEUE_NAMES}


@durable.workflow(name="iq.batch")
def batch(ctx: durable.WorkflowContext, data: dict[str, Any]) -> list[str]:
    """``n`` steps of queue ``queue`` at once, with key ``key`` (or key ``<key><i mod keys>``)."""
    step = STEPS[data["queue"]]
    keys = data.get("keys")

    def key(i: int) -> str | None:
        return f"{data['key']}{i % keys}" if keys else data.get("key")

    return ctx.gather(*(durable.call(step, key(i), data.get("hold", 0.0)) for i in range(data["n"])))
