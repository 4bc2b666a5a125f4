"""Singleton admission under real concurrency: threads with their own PostgreSQL connections."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from django.db import connection

import durable
from durable.engine.vocab import TERMINAL
from durable.models import Run
from durable.testing import drive
from tests.threads import SETTLE, concurrently

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RUNS = 50
THREADS = 4


def _body(i: int) -> int:
    """Record the body's start and end as two ticks of one sequence (a total order across connections)."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO singleton_body (i, began) VALUES (%s, nextval('singleton_tick'))", [i])
        cursor.execute("UPDATE singleton_body SET ended = nextval('singleton_tick') WHERE i = %s", [i])
    return i


@durable.workflow(name="s_fifo", singleton=durable.Singleton(key="account"))
def s_fifo(ctx: Any, data: dict[str, Any]) -> int:
    return ctx.local_step("body", _body, data["i"])


@pytest.fixture
def body_table() -> Any:
    with connection.cursor() as cursor:
        cursor.execute("CREATE SEQUENCE singleton_tick")
        cursor.execute("CREATE TABLE singleton_body (i integer PRIMARY KEY, began bigint, ended bigint)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE singleton_body")
        cursor.execute("DROP SEQUENCE singleton_tick")


def _bodies() -> list[tuple[int, int, int]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT i, began, ended FROM singleton_body ORDER BY began")
        return [tuple(row) for row in cursor.fetchall()]


def _start_and_drive(thread: int) -> None:
    """Start this thread's share of the runs, then run due work until every run has ended."""
    for i in range(thread, RUNS, THREADS):
        durable.start(s_fifo, {"account": "acme", "i": i}, run_id=f"fifo-{i:02d}")
    deadline = time.monotonic() + SETTLE  # only a hung test reaches it
    while Run.objects.filter(workflow="s_fifo").exclude(status__in=TERMINAL).exists():
        assert time.monotonic() < deadline, "runs did not settle"
        drive()


def test_fifty_racing_starts_of_one_key_run_one_at_a_time_in_fifo_order(body_table: Any) -> None:
    concurrently(THREADS, _start_and_drive)
    runs = list(Run.objects.filter(workflow="s_fifo").order_by("singleton_seq"))
    assert [run.status for run in runs] == ["completed"] * RUNS
    assert [run.singleton_seq for run in runs] == list(range(1, RUNS + 1))  # one queue position each
    bodies = _bodies()
    assert len(bodies) == RUNS  # each body ran once
    # One at a time: every body ended before the next one began.
    overlaps = [(a[0], b[0]) for a, b in itertools.pairwise(bodies) if b[1] < a[2]]
    assert overlaps == []
    # FIFO: the bodies ran in the order the runs took their queue positions.
    assert [i for i, _, _ in bodies] == [int(run.id.removeprefix("fifo-")) for run in runs]
