"""The plan of a limited queue's admission read: it reads each group's first steps, not the backlog.

An admission (and a step result that reads its queue) ranks the waiting
steps per (run priority, key). It reads them from the backlog's index, one
probe per group and each group's first ``wanted`` steps, so its cost follows
the groups and the room, not the length of the backlog. This test builds a
backlog of 20,000 steps with statistics taken when it held 1,000 (autoanalyze
comes late on a large table) and counts the checkpoint rows the prepared
statement's generic plan reads.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection

from durable.engine.plan_queues import QueueLimits, plan_queue_admission
from durable.engine.vocab import Admission, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import Checkpoint, Queue, Run
from durable.runtime import now
from durable.store.postgres.queue_rows import read_params, to_seen
from durable.store.queue_statements import PG_ADMIT_READ, PG_ADMIT_READ_PARAMS
from tests.test_wake_plan import TABLES, _all, _series

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

BACKLOG = 20_000
RUNS = 200


def _steps(first: int, rows: int) -> None:
    """Waiting steps ``first``... ``first + rows - 1`` of queue ``q`` (see :func:`_backlog`)."""
    i = f"(i + {first - 1})"
    _series(
        Checkpoint,
        rows,
        run=f"'r' || (1 + {i} %% {RUNS})",
        seq=i,
        name="'work'",
        kind=f"'{CheckpointKind.STEP}'",
        status=f"'{CheckpointStatus.PENDING}'",
        queue="'q'",
        admission=f"'{Admission.WAITING}'",
        enqueued_at=f"now() + {i} * interval '1 millisecond'",
        queue_key=f"CASE WHEN {i} %% 1000 = 500 THEN 'k' END",
        priority=f"CASE WHEN 1 + {i} %% {RUNS} <= 10 THEN 5 ELSE 0 END",
    )


def _backlog() -> None:
    """RUNS running runs and BACKLOG waiting steps of queue ``q``, statistics taken at the first 1,000.

    Step ``i`` belongs to run ``r<1 + i % RUNS>``; runs ``r1``... ``r10`` have priority 5 (their
    steps too, as a turn writes them); steps 500, 1500... (of run ``r101``, priority 0) have key ``k``.
    """
    _series(Run, RUNS, id="'r' || i", workflow="'wf'", status=f"'{RunStatus.RUNNING}'", priority="0")
    Run.objects.filter(id__in=[f"r{i}" for i in range(1, 11)]).update(priority=5)
    _steps(1, 1000)
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ANALYZE {table}")
    _steps(1001, BACKLOG - 1000)
    Queue.objects.create(name="q", updated_at=now())


def _analyzed(sql: str, params: list[Any]) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """The generic plan of ``sql`` as prepared, executed with EXPLAIN ANALYZE; and the rows it returns."""
    count = iter(range(1, len(params) + 1))
    text = re.sub("%s", lambda _: f"${next(count)}", sql)
    placeholders = ", ".join(["%s"] * len(params))
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
        cursor.execute(f"PREPARE planned AS {text}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE planned({placeholders})", params)
        plan = cursor.fetchone()[0]
        cursor.execute(f"EXECUTE planned({placeholders})", params)
        rows = cursor.fetchall()
        cursor.execute("DEALLOCATE planned")
    found = plan if isinstance(plan, list) else json.loads(plan)
    return dict(found[0]["Plan"]), rows


def _checkpoint_rows_read(plan: dict[str, Any]) -> int:
    """Rows of durable_checkpoint every scan of the plan read (returned or filtered out), over all its loops."""
    scans = [n for n in _all(plan) if n.get("Relation Name") == "durable_checkpoint" and "Scan" in n["Node Type"]]
    return sum((n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"] for n in scans)


def test_an_admission_reads_each_groups_first_steps_not_the_whole_backlog():
    _backlog()
    plan = plan_queue_admission("q", now(), QueueLimits(concurrency=10), 60.0, 100)
    explained, rows = _analyzed(PG_ADMIT_READ, read_params(plan, PG_ADMIT_READ_PARAMS))
    seen = to_seen(rows)
    assert seen.wanted == 10
    # Three groups, each its first ten by arrival, ranked 1 to 10.
    groups: dict[tuple[int, str | None], list[tuple[int, int]]] = {}
    for c in seen.candidates:
        groups.setdefault((c.priority, c.key), []).append((c.rank, c.seq))
    assert {g: sorted(seqs) for g, seqs in groups.items()} == {
        (5, None): list(enumerate([*range(1, 10), 200], start=1)),
        (0, None): list(enumerate(range(10, 20), start=1)),
        (0, "k"): list(enumerate(range(500, 10_000, 1000), start=1)),
    }
    # The backlog is 20,000 steps; the read touches a few rows per group and candidate.
    assert _checkpoint_rows_read(explained) < 200, json.dumps(explained)


def test_an_admission_keeps_to_the_backlogs_index_on_statistics_taken_before_any_step_waited():
    """Statistics taken when the queue had only a finished history, then a burst of 20,000 waiting steps.

    Every open step is also in the due-steps index, which leads with the
    status; a generic plan from those statistics (no step pending) read the
    candidates and the holders through it, walking every open step.
    """
    _series(Run, RUNS, id="'r' || i", workflow="'wf'", status=f"'{RunStatus.RUNNING}'", priority="0")
    _series(
        Checkpoint,
        5_000,
        run=f"'r' || (1 + i %% {RUNS})",
        seq=f"{BACKLOG} + i",
        name="'work'",
        kind=f"'{CheckpointKind.STEP}'",
        status=f"'{CheckpointStatus.COMPLETED}'",
        queue="'q'",
        admission=f"'{Admission.ADMITTED}'",
        admitted_at="now() - interval '1 hour'",
    )
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ANALYZE {table}")
    _steps(1, BACKLOG)
    Queue.objects.create(name="q", updated_at=now())
    plan = plan_queue_admission("q", now(), QueueLimits(concurrency=10), 60.0, 100)
    explained, rows = _analyzed(PG_ADMIT_READ, read_params(plan, PG_ADMIT_READ_PARAMS))
    assert len(to_seen(rows).candidates) == 30
    indexes = {n.get("Index Name") for n in _all(explained) if n.get("Relation Name") == "durable_checkpoint"}
    assert "durable_cp_step_due" not in indexes, json.dumps(explained)
    assert _checkpoint_rows_read(explained) < 200, json.dumps(explained)
