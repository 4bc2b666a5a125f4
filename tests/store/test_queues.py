"""Store contract: admission of limited queues' steps (slots, keys, round robin, priority, rate, pause)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from durable.engine.plan_queues import AdmissionRead, QueueLimits, Rate, plan_queue_admission
from durable.engine.vocab import Admission, CheckpointStatus
from tests.store.conftest import OTHER, OWNER, T0, at, running, step, suspend

ERROR = {"message": "down", "code": "ConnectionError", "retryable": True, "type": "ConnectionError", "traceback": None}
LEASE = 60.0


def waiting(seq: int, key: str | None = None, arrived: float = 0.0) -> Any:
    """A step of queue ``q`` written waiting, as a turn writes it."""
    return step(seq, queue="q", queue_key=key, admission=Admission.WAITING, enqueued_at=at(arrived))


def enqueue(store: Any, run_id: str, *records: Any, priority: int = 0) -> None:
    """``records`` written by a turn of run ``run_id``, which stamps each with the run's priority."""
    running(store, run_id, priority=priority)
    result, _ = suspend(store, run_id, *(replace(rec, priority=priority) for rec in records))
    assert result.written


def admit(store: Any, now: float, batch: int = 100, **limits: Any) -> list[tuple[str, int]]:
    plan = plan_queue_admission("q", at(now), QueueLimits(**limits), LEASE, batch)
    return [(grant.run_id, grant.seq) for grant in store.admit_steps(plan).grants]


def test_concurrency_admits_up_to_the_limit_and_a_result_frees_a_slot(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 6)))
    assert store.claim_step("r1", 1, OWNER, at(1), at(61)) is None  # not admitted yet
    assert admit(store, 1, concurrency=2) == [("r1", 1), ("r1", 2)]
    assert admit(store, 1, concurrency=2) == []
    cp = store.load_checkpoints("r1")
    assert (cp[1].admission, cp[1].status, cp[1].wake_at, cp[3].admission) == ("admitted", "pending", at(61), "waiting")
    claim = store.claim_step("r1", 1, OWNER, at(2), at(62))
    assert claim is not None and claim.attempt == 1
    assert store.claim_step("r1", 3, OWNER, at(2), at(62)) is None
    assert admit(store, 2, concurrency=2) == []  # running still holds its slot
    store.finish_step("r1", 1, at(3), output=1)
    assert admit(store, 3, concurrency=2) == [("r1", 3)]


def test_a_lapsed_execution_lease_frees_its_slot(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1))
    assert admit(store, 0, concurrency=1) == [("r1", 1)]
    assert store.claim_step("r1", 1, OWNER, at(1), at(61))
    assert admit(store, 60, concurrency=1) == []
    assert admit(store, 61, concurrency=1) == [("r1", 2)]  # its worker stopped renewing: the slot is free


def test_a_lapsed_admission_is_admitted_again_and_cannot_be_claimed_late(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1))
    assert admit(store, 0, concurrency=1) == [("r1", 1)]
    assert store.claim_step("r1", 1, OWNER, at(60), at(120)) is None  # its grant ran out unclaimed
    assert admit(store, 60, concurrency=1) == [("r1", 1)]  # first in line again
    assert store.claim_step("r1", 1, OWNER, at(61), at(121)) is not None


def test_key_concurrency_skips_keys_at_their_limit(store: Any) -> None:
    enqueue(store, "r1", waiting(1, "a", 0), waiting(2, "a", 1), waiting(3, "b", 2), waiting(4, None, 3))
    assert sorted(admit(store, 5, key_concurrency=1)) == [("r1", 1), ("r1", 3), ("r1", 4)]
    assert admit(store, 5, key_concurrency=1) == []
    store.claim_step("r1", 1, OWNER, at(6), at(66))
    store.finish_step("r1", 1, at(7), output=None)
    assert admit(store, 7, key_concurrency=1) == [("r1", 2)]


@pytest.mark.parametrize("hot_key", ["hot", None], ids=["keyed", "unkeyed"])
def test_round_robin_across_keys_a_hot_key_does_not_starve_the_others(store: Any, hot_key: str | None) -> None:
    """Steps without a key take their turn as one key (their last admission is kept on the queue's row)."""
    hot = [waiting(seq, hot_key, seq) for seq in range(1, 6)]
    enqueue(store, "r1", *hot, waiting(10, "a", 10), waiting(11, "b", 11))
    order = []
    for tick in range(7):
        now = 20 + tick
        granted = admit(store, now, concurrency=1)
        assert len(granted) == 1
        order.append(granted[0][1])
        store.claim_step("r1", granted[0][1], OWNER, at(now), at(now + 60))
        store.finish_step("r1", granted[0][1], at(now), output=None)
    assert order == [1, 10, 11, 2, 3, 4, 5]


def test_one_batch_takes_each_keys_first_step_before_any_keys_second(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, "hot", seq) for seq in range(1, 6)), waiting(10, "a", 10), waiting(11, "b", 11))
    assert admit(store, 20, concurrency=4) == [("r1", 1), ("r1", 10), ("r1", 11), ("r1", 2)]


def test_higher_run_priority_is_admitted_first(store: Any) -> None:
    enqueue(store, "low", waiting(1, arrived=0))
    enqueue(store, "high", waiting(1, arrived=5), priority=5)
    assert admit(store, 10, concurrency=1) == [("high", 1)]


def test_every_priority_and_key_of_the_backlog_is_read_and_ranked(store: Any) -> None:
    """Keys named and unnamed under several priorities: each (priority, key) is a group of the backlog."""
    enqueue(store, "p0", waiting(1, "a", 0), waiting(2, "b", 1), waiting(3, None, 2), waiting(4, "a", 3))
    enqueue(store, "p5", waiting(1, "a", 4), waiting(2, None, 5), priority=5)
    enqueue(store, "p7", waiting(1, "b", 6), priority=7)
    # Highest priority first; within one, each key's first step by arrival, then the seconds.
    assert admit(store, 10, concurrency=6) == [("p7", 1), ("p5", 1), ("p5", 2), ("p0", 1), ("p0", 2), ("p0", 3)]
    assert admit(store, 11, concurrency=7) == [("p0", 4)]


def test_rate_spaces_starts_one_interval_apart_up_to_the_lookahead(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq / 100) for seq in range(1, 11)))
    plan = plan_queue_admission("q", at(1), QueueLimits(rate=Rate(2, 1.0)), LEASE, 100)
    grants = store.admit_steps(plan).grants
    assert [(g.seq, g.start) for g in grants] == [(1, at(1)), (2, at(1.5)), (3, at(2)), (4, at(2.5))]
    assert store.claim_step("r1", 4, OWNER, at(2.4), at(62)) is None  # before its granted start
    assert store.claim_step("r1", 4, OWNER, at(2.5), at(62)) is not None
    # A later admission goes on from the last grant, never bunching starts.
    again = store.admit_steps(plan_queue_admission("q", at(1.2), QueueLimits(rate=Rate(2, 1.0)), LEASE, 100)).grants
    assert [(g.seq, g.start) for g in again] == [(5, at(3))]


def test_a_paused_queue_admits_nothing_and_keeps_its_backlog(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1))
    record = store.configure_queue("q", at(0), paused=True)
    assert (record.name, record.paused, record.overrides) == ("q", True, {})
    plan = plan_queue_admission("q", at(1), QueueLimits(concurrency=5), LEASE, 100)
    assert store.admit_steps(plan).paused is True
    assert store.admit_steps(plan).grants == ()
    assert store.queue_stats("q", at(1)).waiting == 2
    store.configure_queue("q", at(2), paused=False)
    assert admit(store, 2, concurrency=5) == [("r1", 1), ("r1", 2)]


def test_a_stored_override_wins_over_the_settings_limit(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1), waiting(3, arrived=2))
    store.configure_queue("q", at(0), overrides={"concurrency": 1})
    assert admit(store, 1, concurrency=3) == [("r1", 1)]
    store.configure_queue("q", at(1), overrides={"concurrency": None})  # None: no concurrency limit
    assert admit(store, 2, concurrency=3) == [("r1", 2), ("r1", 3)]
    assert store.queue_rows()["q"].overrides == {"concurrency": None}


def test_a_retry_gives_its_slot_back_and_waits_to_be_admitted_again_once_due(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1))
    assert admit(store, 0, concurrency=1) == [("r1", 1)]
    store.claim_step("r1", 1, OWNER, at(1), at(61))
    store.finish_step("r1", 1, at(2), error=ERROR, retry_at=at(30))
    assert store.load_checkpoints("r1")[1].admission == Admission.WAITING
    assert admit(store, 2, concurrency=1) == [("r1", 2)]  # the retry is not due yet
    store.claim_step("r1", 2, OTHER, at(3), at(63))
    store.finish_step("r1", 2, at(4), output=2)
    assert admit(store, 29, concurrency=1) == []
    assert admit(store, 30, concurrency=1) == [("r1", 1)]
    claim = store.claim_step("r1", 1, OWNER, at(30), at(90))
    assert claim is not None and claim.attempt == 2


def test_a_lapse_with_retry_gives_the_slot_back(store: Any) -> None:
    from durable.engine.ports import ClaimCheck

    enqueue(store, "r1", waiting(1))
    admit(store, 0, concurrency=1)
    store.claim_step("r1", 1, OWNER, at(1), at(61))
    assert store.lapse_step("r1", 1, at(62), ClaimCheck(OWNER, 1), ERROR, retry_at=at(70))
    cp = store.load_checkpoints("r1")[1]
    assert (cp.status, cp.admission) == (CheckpointStatus.PENDING, Admission.WAITING)
    assert admit(store, 70, concurrency=1) == [("r1", 1)]


def test_a_cancelled_run_frees_its_slots(store: Any) -> None:
    enqueue(store, "r1", waiting(1))
    enqueue(store, "r2", waiting(1, arrived=1))
    assert admit(store, 2, concurrency=1) == [("r1", 1)]
    store.claim_step("r1", 1, OWNER, at(3), at(63))
    store.cancel("r1", at(4))
    assert admit(store, 4, concurrency=1) == [("r2", 1)]


def test_waiting_steps_are_not_due_nor_lost_nor_redispatched(store: Any) -> None:
    enqueue(store, "r1", waiting(1), step(2))
    assert [row[:2] for row in store.due_steps(at(1), 10)] == [("r1", 2)]
    admit(store, 1, concurrency=1)
    assert sorted(row[:2] for row in store.due_steps(at(1), 10)) == [("r1", 1), ("r1", 2)]
    assert [row["seq"] for row in store.lost_steps(at(200), 10)] == []  # step 2 has no wake: nothing lost
    assert store.pending_steps("r1", at(2), at(100)) == [(2, None)]


def test_queue_stats_count_running_waiting_and_admissions_of_the_last_minute(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 5)))
    admit(store, 10, concurrency=2)
    stats = store.queue_stats("q", at(10) + timedelta(seconds=1))
    assert (stats.running, stats.waiting, stats.oldest_waiting, stats.admitted_last_minute) == (2, 2, at(3), 2)
    assert store.queue_stats("q", at(125)).admitted_last_minute == 0
    assert store.queue_stats("other", T0).running == 0


def test_admissions_per_minute_roll_over_minutes_as_the_row_counts_them(store: Any) -> None:
    """The row's two per-minute counts, written by each store's grant, across minutes and a late clock."""
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 9)))
    assert len(admit(store, 50, batch=2)) == 2  # minute 0
    assert store.queue_stats("q", at(59)).admitted_last_minute == 2
    assert len(admit(store, 70, batch=1)) == 1  # minute 1: minute 0's two become the prior count
    # At 70 s the window reaches back to 10 s: 1 now, and 50/60 of minute 0's two (rounded).
    assert store.queue_stats("q", at(70)).admitted_last_minute == 3
    assert store.queue_stats("q", at(110)).admitted_last_minute == 1  # 2 x 10/60 rounds to 0
    assert len(admit(store, 55, batch=1)) == 1  # a clock behind the row's minute adds to that minute
    assert store.queue_stats("q", at(70)).admitted_last_minute == 4
    assert len(admit(store, 200, batch=1)) == 1  # minute 3: minute 1 is too old to count
    assert store.queue_stats("q", at(200)).admitted_last_minute == 1


def _finish_reading(store: Any, seq: int, now: float, count_only: bool = False, **limits: Any) -> Any:
    """Step ``seq`` of r1 settled by a result that also reads its queue (a store may fill ``read.seen``)."""
    plan = plan_queue_admission("q", at(now), QueueLimits(**limits), LEASE, 100)
    read = AdmissionRead(plan, count_only=count_only)
    claim = store.claim_step("r1", seq, OWNER, at(now), at(now + 60))
    assert claim is not None
    store.finish_step("r1", seq, at(now), output=seq, admission=read)
    return read


def test_a_result_that_reads_its_queue_admits_the_next_step_as_without(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 5)))
    assert admit(store, 5, concurrency=2) == [("r1", 1), ("r1", 2)]
    read = _finish_reading(store, 1, 6, concurrency=2)
    assert (read.seen is not None) == (type(store).__name__ == "PostgresStore")  # the others read when admitting
    if read.seen is not None:  # the PostgreSQL store reads in the result's statement
        assert (read.seen.held_by_key, read.seen.wanted) == ({None: 1}, 1)  # step 1's slot already free
        assert [(c.run_id, c.seq) for c in read.seen.candidates] == [("r1", 3)]
    granted = store.admit_steps(read.plan, read.seen).grants
    assert [(g.run_id, g.seq) for g in granted] == [("r1", 3)]
    assert admit(store, 6, concurrency=2) == []


def test_grants_chosen_from_a_stale_read_are_not_written(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 5)))
    assert admit(store, 5, concurrency=2) == [("r1", 1), ("r1", 2)]
    read = _finish_reading(store, 1, 6, concurrency=2)
    assert admit(store, 6, concurrency=2) == [("r1", 3)]  # another admission took the slot meanwhile
    assert store.admit_steps(read.plan, read.seen).grants == ()  # the read would grant step 3 or 4: refused
    held = store.queue_stats("q", at(7)).running
    assert held == 2


def test_a_pause_after_the_read_wins(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 4)))
    assert admit(store, 5, concurrency=1) == [("r1", 1)]
    read = _finish_reading(store, 1, 6, concurrency=1)
    store.configure_queue("q", at(6), paused=True)
    admitted = store.admit_steps(read.plan, read.seen)
    assert (admitted.grants, admitted.paused) == ((), True)
