"""A process that runs a limited queue's steps on its own threads claims them in the grant's write.

Admission asks the store to claim each grant that may start at once for this
process (:meth:`~durable.engine.plan_queues.QueueAdmissionPlan.claims`) when
the transport runs claimed steps here (the in-process pool). Each such step
is queued with its lease held from the grant, runs with no claim of its own,
and is settled as any claimed step; what cannot be claimed so (a step with a
timeout, a transport that runs nothing here) is dispatched and claimed as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings

import durable
from durable.engine.leases import Hold, LeaseKeeper, _Held
from durable.engine.ports import Transport
from durable.engine.vocab import CheckpointStatus, RunStatus
from durable.models import Checkpoint
from durable.runtime import get_engine

QUEUES = {"q_claims": {"concurrency": 3}, "q_timed": {"concurrency": 3}}
EXECUTION_LEASE = 60.0


@durable.step(queue="q_claims")
def qc_work(i: int) -> int:
    return i * 10


@durable.step(queue="q_timed", timeout=30)
def qc_timed(i: int) -> int:
    return i


@durable.workflow(name="qc_fan")
def qc_fan(ctx: Any, n: int) -> Any:
    return ctx.gather(*(durable.call(qc_work, i) for i in range(n)))


@durable.workflow(name="qc_timed_fan")
def qc_timed_fan(ctx: Any, n: int) -> Any:
    return ctx.gather(*(durable.call(qc_timed, i) for i in range(n)))


class ClaimsHere(Transport):
    """Runs claimed steps on "this process's threads" (a list the test drains); records what it was sent."""

    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.jobs: list[Callable[[], object]] = []
        self.dispatched: list[int] = []

    def dispatch_turn(self, run_id: str, *, delay: float = 0.0, namespace: str | None = None) -> None:
        return None

    def dispatch_step(
        self, run_id: str, seq: int, queue: str | None, *, delay: float = 0.0, namespace: str | None = None
    ) -> bool:
        self.dispatched.append(seq)
        return False

    def runs_claimed_steps(self, queue: str) -> bool:
        return True

    def run_claimed(self, job: Callable[[], object]) -> bool:
        if self.accept:
            self.jobs.append(job)
        return self.accept


class RecordingKeeper(LeaseKeeper):
    """Keeps each hold's renewal for the test to call, with no thread and no timer."""

    def __init__(self) -> None:
        super().__init__()
        self.keys = itertools.count()

    def hold(self, interval: float, renew: Callable[[], bool], on_lost: Callable[[], None]) -> Hold:
        key = next(self.keys)
        self._held[key] = _Held(interval, renew, on_lost, 0.0)
        return Hold(self, key)

    def renew_all(self) -> list[bool]:
        return [held.renew() for held in list(self._held.values())]


def _engine(transport: Transport) -> Any:
    engine = get_engine()
    engine.transport = transport
    return engine


def _settings() -> Any:
    return override_settings(DURABLE={"TRANSPORT": "manual", "QUEUES": QUEUES, "STEP_EXECUTION_LEASE": EXECUTION_LEASE})


def _counting_claims(engine: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    claimed: list[int] = []
    original = engine.store.claim_step

    def claim_step(run_id: str, seq: int, *args: Any, **kwargs: Any) -> Any:
        claimed.append(seq)
        return original(run_id, seq, *args, **kwargs)

    monkeypatch.setattr(engine.store, "claim_step", claim_step)
    return claimed


@pytest.mark.django_db
def test_granted_steps_run_claimed_by_their_grant_once_each_with_no_claim_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _settings():
        transport = ClaimsHere()
        engine = _engine(transport)
        claims = _counting_claims(engine, monkeypatch)
        run_id = durable.start(qc_fan, 7)
        engine.run_turn(run_id)  # 7 steps written waiting; 3 granted, each claimed by the grant
        assert len(transport.jobs) == 3
        rows = Checkpoint.objects.filter(run_id=run_id, queue="q_claims", status=CheckpointStatus.RUNNING)
        assert sorted(rows.values_list("locked_by", "attempts")) == [(engine.owner, 1)] * 3
        ran = 0
        while transport.jobs:
            transport.jobs.pop(0)()  # as a pool thread runs it; its result admits the next, claimed again
            ran += 1
            held = Checkpoint.objects.filter(run_id=run_id, queue="q_claims", status=CheckpointStatus.RUNNING)
            assert held.count() <= 3
        engine.run_turn(run_id)
    assert (ran, claims, transport.dispatched) == (7, [], [])
    attempts = Checkpoint.objects.filter(run_id=run_id, queue="q_claims").values_list("attempts", flat=True)
    assert sorted(attempts) == [1] * 7
    info = durable.get_run(run_id)
    assert (info.status, info.output) == (RunStatus.COMPLETED, [0, 10, 20, 30, 40, 50, 60])


@pytest.mark.django_db
def test_the_lease_of_a_claimed_step_is_held_while_it_waits_for_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    with _settings():
        transport = ClaimsHere()
        engine = _engine(transport)
        keeper = RecordingKeeper()
        monkeypatch.setattr(engine, "keeper", keeper)
        run_id = durable.start(qc_fan, 3)
        engine.run_turn(run_id)
        assert len(keeper._held) == 3  # one hold per claimed step, before any of them runs
        before = set(Checkpoint.objects.filter(run_id=run_id, queue="q_claims").values_list("wake_at", flat=True))
        clock_now = engine.clock.now()
        later = clock_now + timedelta(seconds=EXECUTION_LEASE / 2)
        monkeypatch.setattr(engine.clock, "now", lambda: later)
        assert keeper.renew_all() == [True] * 3
        after = set(Checkpoint.objects.filter(run_id=run_id, queue="q_claims").values_list("wake_at", flat=True))
        assert after == {later + timedelta(seconds=EXECUTION_LEASE)} and after != before
        transport.jobs.pop(0)()
        assert len(keeper._held) == 2  # released once its step settled


@pytest.mark.django_db
def test_a_step_with_a_timeout_is_dispatched_and_claimed_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    with _settings():
        transport = ClaimsHere()
        engine = _engine(transport)
        claims = _counting_claims(engine, monkeypatch)
        run_id = durable.start(qc_timed_fan, 2)
        engine.run_turn(run_id)
        assert (transport.jobs, sorted(transport.dispatched)) == ([], [1, 2])
        for seq in sorted(transport.dispatched):
            engine.execute_step(run_id, seq)
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        assert (claims, cp.status, cp.timeout_at is not None) == ([1, 2], CheckpointStatus.COMPLETED, True)


@pytest.mark.django_db
def test_a_claimed_step_the_threads_refuse_is_left_to_its_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    with _settings():
        transport = ClaimsHere(accept=False)
        engine = _engine(transport)
        keeper = RecordingKeeper()
        monkeypatch.setattr(engine, "keeper", keeper)
        run_id = durable.start(qc_fan, 1)
        engine.run_turn(run_id)
        now = engine.clock.now()
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        # Not renewed (no hold) and not counted as queued here: its lease lapses and the sweep takes it.
        assert (len(keeper._held), engine.grants_here.queued("q_claims", now)) == (0, 0)
        assert (cp.status, cp.locked_by, cp.wake_at) == (
            CheckpointStatus.RUNNING,
            engine.owner,
            cp.admitted_at + timedelta(seconds=EXECUTION_LEASE),
        )
