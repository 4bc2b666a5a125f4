"""Store contract: a suspension that knows its dispatched steps is woken by the last result, not by each.

A turn that creates n dispatched steps and suspends writes ``awaiting_steps
= n`` (every step it creates is one it waits on, and none can have a result
before that commit). Each settling result counts it down under the run's
lock; the run is woken when it reaches zero, or at once by a failure. A
suspension that found a step already in flight cannot know how many are
left (a result may have landed while its turn ran): it writes NULL, and
every result wakes it, as before.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from durable.engine.vocab import RunStatus
from tests.store.conftest import OWNER, at, running, step, suspend, suspended

FAILED = {"message": "no", "code": "E", "retryable": False, "type": "E", "traceback": None}


def _results(store: Any, run_id: str, seqs: range, start: float = 2) -> list[bool]:
    return [store.finish_step(run_id, seq, at(start + i), output=seq) for i, seq in enumerate(seqs)]


def test_a_fan_out_is_woken_by_its_last_result_only(store: Any) -> None:
    suspended(store, "r1", step(1), step(2), step(3))
    assert _results(store, "r1", range(1, 3)) == [False, False]
    run = store.get_run("r1")
    assert (run.status, run.wake_at) == (RunStatus.SUSPENDED, at(300))  # the suspension's own wake, untouched
    assert store.finish_step("r1", 3, at(9), output=3)
    assert store.get_run("r1").wake_at == at(9)


def test_a_failure_wakes_the_run_at_once(store: Any) -> None:
    suspended(store, "r1", step(1), step(2), step(3))
    assert store.finish_step("r1", 2, at(2), error=FAILED)
    assert store.get_run("r1").wake_at == at(2)


def test_a_duplicate_result_is_not_counted_and_the_last_one_still_re_drives(store: Any) -> None:
    suspended(store, "r1", step(1), step(2))
    assert not store.finish_step("r1", 1, at(2), output=1)
    assert not store.finish_step("r1", 1, at(3), output="again")  # settled already: counts nothing
    assert store.finish_step("r1", 2, at(4), output=2)
    # A duplicate of the last result finds nothing left and wakes the run again (a resume lost after it).
    assert store.finish_step("r1", 2, at(5), output="again")
    assert store.load_checkpoints("r1")[2].output == 2


def test_a_re_delivered_settled_step_wakes_only_a_run_whose_steps_all_landed(store: Any) -> None:
    suspended(store, "r1", step(1), step(2))
    assert not store.finish_step("r1", 1, at(2), output=1)
    assert not store.poke_if_settled("r1", 1, at(3))  # step 2 is still out: its result wakes the run
    assert store.get_run("r1").wake_at == at(300)
    assert store.finish_step("r1", 2, at(4), output=2)
    assert store.poke_if_settled("r1", 2, at(5))  # all landed: re-drives a resume that may be lost
    assert store.get_run("r1").wake_at == at(5)


def test_a_retried_attempt_is_not_counted(store: Any) -> None:
    suspended(store, "r1", step(1), step(2))
    assert store.claim_step("r1", 1, OWNER, at(1), at(61)) is not None
    assert not store.finish_step("r1", 1, at(2), error={**FAILED, "retryable": True}, retry_at=at(3))
    assert store.claim_step("r1", 1, OWNER, at(3), at(63)) is not None
    assert not store.finish_step("r1", 1, at(4), output=1)
    assert store.finish_step("r1", 2, at(5), output=2)


def test_a_suspension_with_a_step_in_flight_is_woken_by_every_result(store: Any) -> None:
    running(store, "r1")
    suspend(store, "r1", step(2), step(3), step_seqs=[1])  # step 1 came from an earlier turn
    assert store.finish_step("r1", 2, at(2), output=2)


def test_each_suspension_writes_its_own_count(store: Any) -> None:
    suspended(store, "r1", step(1), step(2), step(3))
    assert store.finish_step("r1", 1, at(2), error=FAILED)  # woken with two still out
    assert store.acquire("r1", OWNER, at(3), at(33)) is not None
    suspend(store, "r1", step(4), now=at(3))  # a new suspension: one fresh step, the count is 1
    assert store.finish_step("r1", 4, at(4), output=4)


def test_finish_and_acquire_leases_the_run_only_at_its_last_result(store: Any) -> None:
    suspended(store, "r1", step(1), step(2))
    assert store.finish_step_and_acquire("r1", 1, at(2), OWNER, at(32), output=1) is None
    assert store.get_run("r1").status == RunStatus.SUSPENDED
    run = store.finish_step_and_acquire("r1", 2, at(3), OWNER, at(33), output=2)
    assert run is not None and (run.status, run.locked_by) == (RunStatus.RUNNING, OWNER)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_results_on_postgresql_wake_the_run_exactly_once() -> None:
    """Results from four connections at once: the count is read as locked, so exactly one result wakes."""
    from django.db import connection

    from durable.store import factory

    if connection.vendor != "postgresql":
        pytest.fail("this test needs PostgreSQL: set DATABASE_URL=postgres://...")
    steps = 40
    suspended(factory.for_connection(connection), "r1", *(step(seq) for seq in range(1, steps + 1)))
    woke: list[bool] = []
    start = threading.Barrier(4)

    def settle(seqs: range) -> None:
        from django.db import connection as own

        try:
            store = factory.for_connection(own)
            start.wait()
            woke.extend(store.finish_step("r1", seq, at(2), output=seq) for seq in seqs)
        finally:
            own.close()

    threads = [threading.Thread(target=settle, args=(range(k + 1, steps + 1, 4),)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store = factory.for_connection(connection)
    assert (len(woke), woke.count(True)) == (steps, 1)
    assert {cp.status for cp in store.load_checkpoints("r1").values()} == {"completed"}
    assert store.get_run("r1").wake_at == at(2)
