"""The PostgreSQL store's queue read in a step result: when it proves that no admission is owed.

A result whose statement read its queue with room and found nothing waiting
writes no admission (durable.engine.admission.after_result). These tests
check the read's ``fresh`` flag: true when nothing changed the queue row
since the statement's snapshot, false when a commit that wrote waiting steps
rewrote the row meanwhile, including the race the flag exists for, driven
with a second connection that holds that commit open while the result
statement waits for the row.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.db import connection

from durable.engine.plan_queues import AdmissionRead, QueueLimits, Rate, plan_queue_admission
from durable.store import factory
from tests.store.conftest import OWNER, at, step
from tests.store.test_queues import LEASE, _finish_reading, admit, enqueue, waiting

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
SETTLE = 30.0


@pytest.fixture
def store() -> Any:
    if connection.vendor != "postgresql":
        pytest.fail("these tests need PostgreSQL: set DATABASE_URL=postgres://...")
    return factory.for_connection(connection)


def test_a_fresh_read_with_room_and_nothing_waiting_proves_no_admission_is_owed(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 3)))
    assert admit(store, 5, concurrency=2) == [("r1", 1), ("r1", 2)]
    read = _finish_reading(store, 1, 6, concurrency=2)
    assert read.seen is not None
    assert (read.seen.fresh, read.seen.candidates, read.seen.wanted) == (True, (), 1)
    assert read.seen.nothing_waits(read.plan)
    assert admit(store, 6, concurrency=2) == []  # and indeed nothing was owed


def test_a_read_that_found_a_step_waiting_leaves_it_to_the_grant(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 4)))
    assert admit(store, 5, concurrency=1) == [("r1", 1)]
    read = _finish_reading(store, 1, 6, concurrency=1)
    assert read.seen is not None
    assert [(c.run_id, c.seq) for c in read.seen.candidates] == [("r1", 2)]
    assert not read.seen.nothing_waits(read.plan)


def test_a_read_of_a_paused_queue_proves_nothing(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 4)))
    assert admit(store, 5, concurrency=2) == [("r1", 1), ("r1", 2)]
    store.configure_queue("q", at(5), paused=True)
    read = _finish_reading(store, 1, 6, concurrency=2)
    assert read.seen is not None
    assert (read.seen.paused, read.seen.candidates) == (True, ())
    assert not read.seen.nothing_waits(read.plan)


def _other_connection() -> psycopg.Connection[Any]:
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"] or "127.0.0.1", port=settings["PORT"] or 5432, user=settings["USER"],
        dbname=settings["NAME"], password=settings["PASSWORD"] or None,
    )  # fmt: skip


def _wait_for_lock_wait(probe: psycopg.Connection[Any], deadline: float) -> None:
    """Until some session waits for a row lock (the result statement, on the queue row)."""
    import time

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.01)
    raise AssertionError("the result statement never waited for the queue row")


def test_a_step_written_waiting_while_the_result_reads_makes_the_read_stale(store: Any) -> None:
    enqueue(store, "r1", waiting(1, arrived=1))
    enqueue(store, "r2")
    assert admit(store, 5, concurrency=1) == [("r1", 1)]
    assert store.claim_step("r1", 1, OWNER, at(6), at(66)) is not None
    version = _queue_version()
    other, probe = _other_connection(), _other_connection()
    probe.autocommit = True
    try:
        # A turn of r2 writing a waiting step, as its one-statement commit does: the row
        # inserted and the queue row rewritten, not yet committed.
        other.execute(
            "INSERT INTO durable_checkpoint (run_id, seq, name, kind, status, attempts, dispatches, queue, "
            "admission, enqueued_at, events) VALUES ('r2', 1, 's1', 'step', 'pending', 0, 0, 'q', 'waiting', "
            "%s, '[]'::jsonb)",
            [at(6)],
        )
        other.execute("UPDATE durable_queue SET updated_at = %s WHERE name = 'q'", [at(6)])
        read = AdmissionRead(plan_queue_admission("q", at(7), QueueLimits(concurrency=1), LEASE, 100))
        done = threading.Event()

        def finish() -> None:
            try:
                factory.for_connection(connection).finish_step("r1", 1, at(7), output=1, admission=read)
            finally:
                connection.close()
                done.set()

        worker = threading.Thread(target=finish)
        worker.start()
        _wait_for_lock_wait(probe, SETTLE)
        other.commit()
        worker.join(SETTLE)
        assert done.is_set()
    finally:
        other.close()
        probe.close()
    assert read.seen is not None
    assert read.seen.candidates == ()  # its snapshot predates the waiting step
    assert read.seen.fresh is False  # but the row it locked is newer than that snapshot
    assert not read.seen.nothing_waits(read.plan)  # so the engine admits under the lock
    assert read.seen.version == version  # grants chosen from it would be refused (the row moved on)
    assert admit(store, 7, concurrency=1) == [("r2", 1)]


def _queue_version() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM durable_queue WHERE name = 'q'")
        return str(cursor.fetchone()[0])


def test_a_commit_that_writes_waiting_steps_rewrites_their_queue_row(store: Any) -> None:
    enqueue(store, "r1", waiting(1, arrived=1))
    assert admit(store, 2, concurrency=1) == [("r1", 1)]  # the queue row exists from here
    before = _queue_version()
    enqueue(store, "r2", step(1))  # a step of no limited queue: the row is left alone
    assert _queue_version() == before
    enqueue(store, "r3", waiting(1, arrived=3))
    assert _queue_version() != before


def test_an_admission_that_another_overtakes_after_its_first_read_grants_under_the_lock(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read takes no lock; a grant committed after it refuses its choice, and the locked read decides."""
    from durable.store.queue_statements import PG_ADMIT_GRANT, PG_ADMIT_PEEK, PG_ADMIT_READ

    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 6)))
    assert admit(store, 5, concurrency=2) == [("r1", 1), ("r1", 2)]
    for seq in (1, 2):  # both slots free
        assert store.claim_step("r1", seq, OWNER, at(6), at(66)) is not None
        store.finish_step("r1", seq, at(6), output=seq)
    executed: list[str] = []
    overtaken: list[int] | None = None
    execute = store._execute

    def spy(sql: str, params: list[Any]) -> Any:
        nonlocal overtaken
        executed.append({PG_ADMIT_PEEK: "peek", PG_ADMIT_GRANT: "grant", PG_ADMIT_READ: "locked"}.get(sql, "other"))
        rows = execute(sql, params)
        if sql == PG_ADMIT_PEEK and overtaken is None:  # another admitter grants between this read and its grant
            overtaken = []
            overtaken += [grant.seq for grant in store.admit_steps(_plan(7, concurrency=2)).grants]
            for seq in overtaken:  # and its steps start at once: no result to come would admit for this one
                assert store.claim_step("r1", seq, OWNER, at(7), at(67)) is not None
        return rows

    monkeypatch.setattr(store, "_execute", spy)
    granted = [grant.seq for grant in store.admit_steps(_plan(7, concurrency=2)).grants]
    assert overtaken == [3, 4]
    assert granted == []  # its choice (3, 4) refused; under the lock: no room left
    # The overtaker's peek and grant, its steps' two claims, this admission's refused grant, then a
    # count of the steps granted and not started (none): it reads under the lock.
    assert executed == ["peek", "peek", "grant", "other", "other", "grant", "other", "locked"]
    assert store.queue_stats("q", at(8)).running == 2


def test_an_admission_grants_from_its_first_read_when_nobody_overtakes(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable.store.queue_statements import PG_ADMIT_GRANT, PG_ADMIT_PEEK

    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 4)))
    assert admit(store, 5, concurrency=2) == [("r1", 1), ("r1", 2)]  # the queue row exists from here
    assert store.claim_step("r1", 1, OWNER, at(6), at(66)) is not None
    store.finish_step("r1", 1, at(6), output=1)
    executed: list[str] = []
    execute = store._execute
    monkeypatch.setattr(store, "_execute", lambda sql, params: executed.append(sql) or execute(sql, params))
    assert [grant.seq for grant in store.admit_steps(_plan(7, concurrency=2)).grants] == [3]
    assert executed == [PG_ADMIT_PEEK, PG_ADMIT_GRANT]  # two statements, no transaction of its own


def test_grants_sharing_their_start_and_lease_pass_each_once(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grants of one admission mostly share both instants: each then goes as one value (the
    driver adapts an array element by element), and every granted row still gets it; a rate's
    grants, each at a start of its own, pass their starts as an array."""
    from durable.store.queue_statements import PG_ADMIT_GRANT

    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 6)))
    granted: list[list[Any]] = []
    execute = store._execute

    def spy(sql: str, params: list[Any]) -> Any:
        if sql == PG_ADMIT_GRANT:
            granted.append(params)
        return execute(sql, params)

    monkeypatch.setattr(store, "_execute", spy)
    assert admit(store, 5, concurrency=3) == [("r1", 1), ("r1", 2), ("r1", 3)]
    assert [p for p in granted[-1] if isinstance(p, list)] == [granted[-1][3]]  # the ids alone
    assert {(row.admitted_at, row.wake_at) for row in _rows("r1", 1, 2, 3)} == {(at(5), at(65))}
    assert admit(store, 5, rate=Rate(2, 1.0)) == [("r1", 4), ("r1", 5)]
    assert sum(isinstance(p, list) for p in granted[-1]) == 3  # the ids, the starts and their leases
    assert [row.admitted_at for row in _rows("r1", 4, 5)] == [at(5), at(5.5)]


def _rows(run_id: str, *seqs: int) -> list[Any]:
    from durable.models import Checkpoint

    return list(Checkpoint.objects.filter(run_id=run_id, seq__in=seqs).order_by("seq"))


def _plan(now: float, **limits: Any) -> Any:
    return plan_queue_admission("q", at(now), QueueLimits(**limits), LEASE, 100)


def test_a_results_read_overtaken_by_a_grant_admits_from_a_fresh_read_without_the_lock(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable.store.queue_statements import PG_ADMIT_GRANT, PG_ADMIT_PEEK

    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 7)))
    assert admit(store, 5, concurrency=3) == [("r1", 1), ("r1", 2), ("r1", 3)]
    for seq in (2, 3):  # started: a read with two granted steps not started would read short
        assert store.claim_step("r1", seq, OWNER, at(6), at(66)) is not None
    read = _finish_reading(store, 1, 6, concurrency=3)
    assert read.seen is not None and [c.seq for c in read.seen.candidates] == [4]
    for seq in (2, 3):
        store.finish_step("r1", seq, at(6), output=seq)
    assert admit(store, 7, batch=1, concurrency=3) == [("r1", 4)]  # another admitter, after the read
    executed: list[str] = []
    execute = store._execute
    monkeypatch.setattr(store, "_execute", lambda sql, params: executed.append(sql) or execute(sql, params))
    assert [grant.seq for grant in store.admit_steps(read.plan, read.seen).grants] == [5, 6]
    assert executed == [PG_ADMIT_GRANT, PG_ADMIT_PEEK, PG_ADMIT_GRANT]  # refused, read again, granted
    assert store.queue_stats("q", at(8)).running == 3
