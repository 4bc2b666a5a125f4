"""Store contract: a grant claimed by its own write (``QueueAdmissionPlan.claim_owner``).

A process that runs a limited queue's steps on its own threads asks the
admission to claim what it grants to start at once, as a step's claim would:
the step is then ``running`` for that owner, one attempt counted, its lease
the grant's, and it needs no claim of its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from durable.engine.plan_queues import AdmissionRead, QueueLimits, Rate, plan_queue_admission
from durable.engine.ports import ClaimCheck
from durable.engine.vocab import Admission, CheckpointStatus
from tests.store.conftest import OWNER, at
from tests.store.test_queues import LEASE, enqueue, waiting


def admit_claiming(store: Any, now: float, **limits: Any) -> Any:
    plan = plan_queue_admission("q", at(now), QueueLimits(**limits), LEASE, 100, claim_owner=OWNER)
    return store.admit_steps(plan)


def test_a_grant_that_may_start_now_is_claimed_by_its_write(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 4)))
    admitted = admit_claiming(store, 5, concurrency=2)
    assert [(g.run_id, g.seq) for g in admitted.grants] == [("r1", 1), ("r1", 2)]
    claims = sorted(admitted.claims, key=lambda c: c.seq)
    assert [(c.run_id, c.seq, c.name, c.attempt, c.queue) for c in claims] == [
        ("r1", 1, "work", 1, "q"),
        ("r1", 2, "work", 1, "q"),
    ]
    assert claims[0].input == {"args": [1], "kwargs": {}}
    assert (claims[0].namespace, claims[0].ready_at) == ("default", at(1))
    cp = store.load_checkpoints("r1")
    assert (cp[1].status, cp[1].admission, cp[1].attempts, cp[1].wake_at) == (
        CheckpointStatus.RUNNING,
        Admission.ADMITTED,
        1,
        at(5 + LEASE),
    )
    assert cp[3].status == CheckpointStatus.PENDING  # not granted: no slot
    assert store.claim_step("r1", 1, OWNER, at(6), at(66)) is None  # claimed already: no second attempt


def test_a_claimed_grant_holds_its_slot_until_its_result_and_the_result_is_accepted(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1))
    assert [c.seq for c in admit_claiming(store, 5, concurrency=1).claims] == [1]
    assert admit_claiming(store, 6, concurrency=1).grants == ()  # its slot is held
    assert store.renew_step("r1", 1, OWNER, at(200))  # its owner renews the lease as for any claim
    store.finish_step("r1", 1, at(7), output=1, claim=ClaimCheck(OWNER, 1))
    assert store.load_checkpoints("r1")[1].status == CheckpointStatus.COMPLETED
    assert [c.seq for c in admit_claiming(store, 8, concurrency=1).claims] == [2]


def test_a_claimed_grant_whose_owner_died_frees_its_slot_when_its_lease_lapses(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1))
    assert [c.seq for c in admit_claiming(store, 0, concurrency=1).claims] == [1]
    assert admit_claiming(store, LEASE - 1, concurrency=1).grants == ()
    assert [c.seq for c in admit_claiming(store, LEASE, concurrency=1).claims] == [2]  # never renewed: lapsed


def test_a_grant_that_starts_later_is_not_claimed(store: Any) -> None:
    enqueue(store, "r1", waiting(1), waiting(2, arrived=1))
    plan = plan_queue_admission("q", at(5), QueueLimits(rate=Rate(1, 1.0)), LEASE, 100, claim_owner=OWNER)
    admitted = store.admit_steps(plan)
    assert [(g.seq, g.start) for g in admitted.grants] == [(1, at(5)), (2, at(6))]
    assert [c.seq for c in admitted.claims] == [1]
    cp = store.load_checkpoints("r1")
    assert (cp[2].status, cp[2].admission, cp[2].attempts) == (CheckpointStatus.PENDING, Admission.ADMITTED, 0)


def test_without_an_owner_nothing_is_claimed(store: Any) -> None:
    enqueue(store, "r1", waiting(1))
    plan = plan_queue_admission("q", at(5), QueueLimits(concurrency=1), LEASE, 100)
    admitted = store.admit_steps(plan)
    assert ([g.seq for g in admitted.grants], admitted.claims) == ([1], ())
    assert store.load_checkpoints("r1")[1].status == CheckpointStatus.PENDING


def test_grants_chosen_from_a_result_read_are_claimed_too(store: Any) -> None:
    enqueue(store, "r1", *(waiting(seq, arrived=seq) for seq in range(1, 4)))
    assert [c.seq for c in admit_claiming(store, 5, concurrency=1).claims] == [1]
    plan = plan_queue_admission("q", at(6), QueueLimits(concurrency=1), LEASE, 100)
    read = AdmissionRead(plan)
    store.finish_step("r1", 1, at(6), output=1, claim=ClaimCheck(OWNER, 1), admission=read)
    admitted = store.admit_steps(replace(plan, claim_owner=OWNER), read.seen)
    assert [(c.seq, c.attempt) for c in admitted.claims] == [(2, 1)]
    assert store.load_checkpoints("r1")[2].status == CheckpointStatus.RUNNING
