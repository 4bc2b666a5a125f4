"""The PostgreSQL store's short queue read in a step result.

While at least the leave threshold (a quarter of the concurrency in force,
at least ``LEAVE_SLOT_MIN``) of a queue's slots are granted to steps no
worker has started, a result leaves its freed slot to a later result
(``QueueSeen.leaves_slot``). Its statement then stops counting at that many
such steps and reads neither the other holders nor the backlog: these tests
check that the short read says exactly what the decision needs, that it is
taken only when the decision is to leave, and that a full read is what a
result gets otherwise. A busy queue's result may read the count alone
(``AdmissionRead.count_only``): the same decision, from a statement that
reads nothing else.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection

from durable.engine.plan_queues import AdmissionRead, QueueLimits, leave_threshold, plan_queue_admission
from durable.store import factory
from durable.store.postgres.queue_rows import read_params
from durable.store.queue_statements import PG_ADMIT_READ, PG_ADMIT_READ_PARAMS, PG_COUNT_READ, PG_COUNT_READ_PARAMS
from tests.store.conftest import OWNER, at
from tests.store.test_queues import _finish_reading, admit, enqueue, waiting

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def store() -> Any:
    if connection.vendor != "postgresql":
        pytest.fail("these tests need PostgreSQL: set DATABASE_URL=postgres://...")
    return factory.for_connection(connection)


def _granted(store: Any, concurrency: int, started: int) -> None:
    """20 steps waiting in queue q, ``concurrency`` of them granted, ``started`` of those after the first claimed.

    The first is the step whose result reads (``_finish_reading`` claims it).
    """
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 21)))
    assert len(admit(store, 5, concurrency=concurrency)) == concurrency
    for seq in range(2, started + 2):
        assert store.claim_step("r1", seq, OWNER, at(5), at(65)) is not None


def test_a_result_with_enough_granted_steps_not_started_reads_short_and_leaves_its_slot(store: Any) -> None:
    _granted(store, concurrency=12, started=0)  # 11 granted and not started; the threshold is 3
    read = _finish_reading(store, 1, 6, concurrency=12)
    assert read.seen is not None
    assert read.seen.unstarted == leave_threshold(12) == 3  # counted up to the threshold, no further
    assert (read.seen.candidates, read.seen.wanted, dict(read.seen.held_by_key)) == ((), 0, {})
    assert read.seen.leaves_slot(read.plan)
    assert not read.seen.nothing_waits(read.plan)  # never taken for "nothing waits"


def test_below_the_threshold_a_result_reads_every_holder_and_the_backlog(store: Any) -> None:
    _granted(store, concurrency=12, started=9)  # 2 granted and not started, under the threshold of 3
    read = _finish_reading(store, 1, 6, concurrency=12)
    assert read.seen is not None
    assert (read.seen.unstarted, dict(read.seen.held_by_key), read.seen.wanted) == (2, {None: 11}, 1)
    assert [c.seq for c in read.seen.candidates] == [13]
    assert not read.seen.leaves_slot(read.plan)


def test_the_threshold_follows_a_stored_concurrency_override(store: Any) -> None:
    _granted(store, concurrency=4, started=0)  # 3 granted and not started
    store.configure_queue("q", at(5), overrides={"concurrency": 4})  # in force: 4, threshold 2
    read = _finish_reading(store, 1, 6, concurrency=40)  # the settings' 40 would make it 10
    assert read.seen is not None
    assert read.seen.unstarted == leave_threshold(4) == 2
    assert read.seen.leaves_slot(read.plan)
    store.configure_queue("q", at(7), overrides={"concurrency": None})  # the limit turned off: never short
    read = _finish_reading(store, 2, 8, concurrency=40)
    assert read.seen is not None and read.seen.unstarted == 2  # 3 and 4, all of them counted
    assert not read.seen.leaves_slot(read.plan)


def test_a_paused_queue_is_read_in_full(store: Any) -> None:
    _granted(store, concurrency=12, started=0)
    store.configure_queue("q", at(5), paused=True)
    read = _finish_reading(store, 1, 6, concurrency=12)
    assert read.seen is not None and read.seen.paused
    assert (read.seen.unstarted, dict(read.seen.held_by_key)) == (11, {None: 11})  # not stopped at 3
    assert not read.seen.leaves_slot(read.plan)


def test_steps_granted_to_a_run_that_is_over_do_not_count_as_waiting_to_start(store: Any) -> None:
    enqueue(store, "r2", *(waiting(seq, arrived=seq / 10) for seq in range(1, 4)))  # first in line
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 6)))
    assert admit(store, 5, concurrency=4) == [("r2", 1), ("r2", 2), ("r2", 3), ("r1", 1)]
    store.cancel("r2", at(5))  # its 3 granted steps, never started, hold no slot any more
    read = _finish_reading(store, 1, 6, concurrency=4)
    assert read.seen is not None
    assert (read.seen.unstarted, dict(read.seen.held_by_key), read.seen.wanted) == (0, {}, 4)
    assert [c.seq for c in read.seen.candidates if c.run_id == "r1"] == [2, 3, 4, 5]


def test_a_count_read_leaves_the_slot_exactly_when_the_full_read_would(store: Any) -> None:
    _granted(store, concurrency=12, started=0)  # 11 granted and not started; the threshold is 3
    read = _finish_reading(store, 1, 6, count_only=True, concurrency=12)
    assert read.seen is not None
    assert read.seen.unstarted == leave_threshold(12) == 3
    assert (read.seen.candidates, read.seen.wanted, read.seen.fresh) == ((), 0, False)
    assert read.seen.leaves_slot(read.plan)
    assert not read.seen.nothing_waits(read.plan)


def test_a_count_read_counts_the_granted_steps_of_every_active_run(store: Any) -> None:
    enqueue(store, "r2", *(waiting(seq, arrived=seq / 10) for seq in range(1, 3)))  # first in line
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 6)))
    assert len(admit(store, 5, concurrency=8)) == 7  # r2's 2 and r1's 5; threshold 2
    read = _finish_reading(store, 1, 6, count_only=True, concurrency=8)
    assert read.seen is not None and read.seen.unstarted == leave_threshold(8) == 2
    assert read.seen.leaves_slot(read.plan)


def test_a_count_read_falls_short_while_a_run_that_is_over_holds_the_first_granted_steps(store: Any) -> None:
    """Only the first threshold's worth of granted steps are looked at: the result then reads in full.

    Never the other way: a slot is left only when that many granted steps of
    active runs wait to start.
    """
    enqueue(store, "r2", *(waiting(seq, arrived=seq / 10) for seq in range(1, 3)))  # first in line
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 8)))
    assert len(admit(store, 5, concurrency=8)) == 8  # r2's 2, r1's 1 to 6; threshold 2
    store.cancel("r2", at(5))
    read = _finish_reading(store, 1, 6, count_only=True, concurrency=8)
    assert read.seen is not None and read.seen.unstarted == 0  # r2's two took the places counted
    assert not read.seen.leaves_slot(read.plan)
    read = _finish_reading(store, 2, 7, concurrency=8)  # the full read it leads to counts every holder
    assert read.seen is not None and read.seen.unstarted == 4 and dict(read.seen.held_by_key) == {None: 4}


def _explained(sql: str, params: list[Any], analyze: bool = True) -> tuple[dict[str, Any], tuple[Any, ...] | None]:
    """The generic plan of ``sql`` as prepared; ``analyze``: run with EXPLAIN ANALYZE, and its first row, run again.

    Without ``analyze`` nothing is executed (for a statement that writes).
    """
    numbered = iter(range(1, len(params) + 1))
    placeholders = ", ".join(["%s"] * len(params))
    row = None
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE explained AS {re.sub('%s', lambda _: f'${next(numbered)}', sql)}")
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
            cursor.execute(f"EXPLAIN ({options}) EXECUTE explained({placeholders})", params)
            found = cursor.fetchone()[0]
            if analyze:
                cursor.execute(f"EXECUTE explained({placeholders})", params)
                row = cursor.fetchone()
        finally:
            cursor.execute("RESET plan_cache_mode")
            cursor.execute("DEALLOCATE explained")
    return (found if isinstance(found, list) else json.loads(found))[0]["Plan"], row


def _run_lookups(node: dict[str, Any]) -> int:
    """How many times the plan under ``node`` read durable_run (a scan's loops)."""
    return sum(n["Actual Loops"] for n in _plan_nodes(node) if n.get("Relation Name") == "durable_run")


def test_a_count_read_looks_each_run_up_once(store: Any) -> None:
    _granted(store, concurrency=20, started=0)  # 20 granted to r1, not started; the threshold is 5
    plan = plan_queue_admission("q", at(6), QueueLimits(concurrency=20), 60.0, 100)
    explained, row = _explained(PG_COUNT_READ, read_params(plan, PG_COUNT_READ_PARAMS, run_id="", seq=-1))
    assert row is not None and row[2] == leave_threshold(20) == 5  # the steps counted
    assert _run_lookups(explained) == 1, json.dumps(explained)


def test_a_full_read_looks_each_holders_run_up_once(store: Any) -> None:
    _granted(store, concurrency=20, started=4)  # 20 of r1's steps hold slots, 4 of them started
    plan = plan_queue_admission("q", at(6), QueueLimits(concurrency=20), 60.0, 100)
    explained, row = _explained(PG_ADMIT_READ, read_params(plan, PG_ADMIT_READ_PARAMS))
    assert row is not None and (json.loads(row[5]), row[6], row[7]) == (
        [[None, 20]],
        0,
        16,
    )  # held by key, wanted, unstarted
    [holders] = [n for n in _plan_nodes(explained) if n.get("Subplan Name") == "CTE holders"]
    assert _run_lookups(holders) == 1, json.dumps(holders)


def test_a_count_read_below_the_threshold_says_only_that_the_result_must_admit(store: Any) -> None:
    _granted(store, concurrency=12, started=9)  # 2 granted and not started, under the threshold of 3
    read = _finish_reading(store, 1, 6, count_only=True, concurrency=12)
    assert read.seen is not None
    assert (read.seen.unstarted, read.seen.candidates, read.seen.fresh) == (0, (), False)
    assert not read.seen.leaves_slot(read.plan)
    assert not read.seen.nothing_waits(read.plan)  # never proof that nothing waits: the result admits
    granted = store.admit_steps(read.plan).grants  # the admission it asks for reads for itself
    assert [g.seq for g in granted] == [13]


def test_a_count_read_follows_the_stored_override_and_the_pause(store: Any) -> None:
    _granted(store, concurrency=4, started=0)  # 3 granted and not started
    store.configure_queue("q", at(5), overrides={"concurrency": 4})  # in force: 4, threshold 2
    read = _finish_reading(store, 1, 6, count_only=True, concurrency=40)
    assert read.seen is not None and read.seen.unstarted == 2 and read.seen.leaves_slot(read.plan)
    store.configure_queue("q", at(7), paused=True)
    read = _finish_reading(store, 2, 8, count_only=True, concurrency=40)
    assert read.seen is not None and read.seen.paused
    assert not read.seen.leaves_slot(read.plan)


def test_a_count_read_of_a_queue_never_stored_leaves_nothing(store: Any) -> None:
    enqueue(store, "r1", waiting(1, arrived=1))
    store.claim_step("r1", 1, OWNER, at(5), at(65))  # admitted by hand: no admission wrote the queue row
    read = AdmissionRead(plan_queue_admission("nowhere", at(6), QueueLimits(concurrency=4), 60, 100), True)
    store.finish_step("r1", 1, at(6), output=1, admission=read)
    assert read.seen is not None
    assert (read.seen.paused, read.seen.unstarted, dict(read.seen.overrides)) == (False, 0, {})
    assert not read.seen.leaves_slot(read.plan)


def _racing_grant(store: Any, monkeypatch: Any) -> list[str]:
    """Make the next peek's grants lose their race: the queue row moves on between the peek and the grant.

    Returns the statements the store runs from then on (their first words).
    """
    ran: list[str] = []
    execute = store._execute

    def spy(sql: str, params: Any) -> Any:
        ran.append(" ".join(sql.split()[:4]))
        if sql.startswith("WITH lk AS (SELECT 1") and len(ran) == 2:  # the grant chosen from the peek
            store.configure_queue("q", at(5))  # another admitter's write: a new row version
        return execute(sql, params)

    monkeypatch.setattr(store, "_execute", spy)
    return ran


def test_an_admission_that_lost_its_race_leaves_its_slot_while_granted_steps_wait_to_start(
    store: Any, monkeypatch: Any
) -> None:
    _granted(store, concurrency=12, started=0)  # 12 granted, none started: the threshold is 3
    store.finish_step("r1", 1, at(6), output=1)  # one slot free, 8 steps waiting
    plan = plan_queue_admission("q", at(6), QueueLimits(concurrency=12), 60, 100)
    ran = _racing_grant(store, monkeypatch)
    assert store.admit_steps(plan).grants == ()  # the 11 granted steps' results admit after them
    assert len(ran) == 3 and "FOR UPDATE" not in " ".join(ran)  # peek, refused grant, count: no locked read


def test_an_admission_that_lost_its_race_reads_under_the_lock_when_the_workers_keep_up(
    store: Any, monkeypatch: Any
) -> None:
    _granted(store, concurrency=12, started=10)  # 1 granted and not started, under the threshold of 3
    store.finish_step("r1", 1, at(6), output=1)
    plan = plan_queue_admission("q", at(6), QueueLimits(concurrency=12), 60, 100)
    _racing_grant(store, monkeypatch)
    assert [g.seq for g in store.admit_steps(plan).grants] == [13]  # granted under the lock


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """``node`` and every node under it, depth first."""
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


def test_a_busy_queues_count_is_read_before_the_result_locks_its_run(store: Any) -> None:
    """The count takes no lock: it is read before the run's row, which the run's other results queue for.

    In the prepared statement's generic plan, the locking read of the run is
    a one-time filter on the count's decision above the run's scan: the
    filter is evaluated once, before the scan returns a row to lock.
    """
    _granted(store, concurrency=12, started=0)
    sent: list[tuple[str, list[Any]]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if " short AS " in sql:
            sent.append((sql, list(params)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        read = _finish_reading(store, 1, 6, count_only=True, concurrency=12)
    assert read.seen is not None and read.seen.leaves_slot(read.plan)  # it read the count, and left
    [(sql, params)] = sent
    plan, _ = _explained(sql, params, analyze=False)
    [old] = [n for n in _plan_nodes(plan) if n.get("Subplan Name") == "CTE old"]
    assert old["Node Type"] == "LockRows", json.dumps(old)
    first = [n for n in old["Plans"] if n.get("Parent Relationship") == "InitPlan"]
    assert [n.get("CTE Name") for n in first] == ["short"], json.dumps(old)
    [gate] = [n for n in old["Plans"] if n.get("Parent Relationship") == "Outer"]
    param = re.search(r"returns (\$\d+)", first[0]["Subplan Name"])
    assert param is not None and gate["Node Type"] == "Result", json.dumps(old)
    assert gate.get("One-Time Filter") == param.group(1), json.dumps(old)  # the count's decision, first
    assert [n.get("Relation Name") for n in gate["Plans"]] == ["durable_run"], json.dumps(old)
