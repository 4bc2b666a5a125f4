"""Worker fleet: advertised descriptors, blocked runs, and their re-check."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings

import durable
from durable import runtime
from durable import worker as sweeps
from durable.fleet import descriptor
from durable.models import Checkpoint
from durable.runtime import get_engine
from durable.testing import fake_clock
from tests.test_repairs import Recorder

pytestmark = pytest.mark.django_db


@durable.step(name="ledger.post")
def ledger_post(amount: int) -> int:
    return amount


@durable.workflow(name="f_ledger")
def f_ledger(ctx, amount):
    return ctx.step(ledger_post, amount)


@pytest.fixture
def celery_engine(monkeypatch):
    with override_settings(DURABLE={"TRANSPORT": "celery"}):
        engine = get_engine()
        recorder = Recorder()
        monkeypatch.setattr(engine, "transport", recorder)
        yield engine, recorder


def advertise(worker_id: str, queues: list[str], ttl: float = 30) -> None:
    now = runtime.now()
    advertised = descriptor(worker_id, queues, registry=runtime.registry)
    get_engine().store.advertise(advertised, now, now + timedelta(seconds=ttl))


def test_step_nobody_serves_parks_the_run_blocked_before_any_pending_write(celery_engine):
    engine, recorder = celery_engine
    advertise("w-other", ["durable", "emails"])  # alive, but not on the ledger queue
    run_id = durable.start(f_ledger, 5)
    assert engine.run_turn(run_id) == "blocked"
    run = durable.get_run(run_id)
    assert run.status == "blocked"
    assert run.error["code"] == "no_capable_worker"
    assert "'ledger.post'" in run.error["message"] and "'ledger'" in run.error["message"]
    assert not Checkpoint.objects.filter(run_id=run_id).exists()
    assert recorder.steps == []


def test_blocked_run_resumes_once_a_capable_worker_appears(celery_engine):
    engine, recorder = celery_engine
    run_id = durable.start(f_ledger, 5)
    engine.run_turn(run_id)
    assert sweeps.recheck_blocked(engine) == 0
    advertise("w-ledger", ["ledger"])
    assert sweeps.recheck_blocked(engine) == 1
    assert durable.get_run(run_id).status == "pending"
    assert engine.run_turn(run_id) == "suspended"
    assert recorder.steps == [(run_id, 1, "ledger")]


def test_expired_advertisement_does_not_count(celery_engine):
    engine, _ = celery_engine
    advertise("w-stale", ["ledger"], ttl=30)
    with fake_clock() as fc:
        fc.advance("31s")
        assert engine.fleet.can_serve("ledger.post", "ledger") is False
    advertise("w-stale", ["ledger"], ttl=30)
    assert engine.fleet.can_serve("ledger.post", "ledger") is True


def test_inline_transport_never_blocks():
    run_id = durable.start(f_ledger, 2)
    assert get_engine().run_turn(run_id) == "suspended"


def test_durable_workers_command_lists_the_live_fleet(capsys):
    call_command("durable_workers")
    assert "no live workers" in capsys.readouterr().out
    advertise("host:1:abc", ["durable", "ledger"])
    call_command("durable_workers", "--steps")
    out = capsys.readouterr().out
    assert "host:1:abc" in out and "queues=durable,ledger" in out and "ledger.post" in out
    assert "sweep queue" not in out  # not on Celery


def test_durable_workers_warns_when_no_live_worker_consumes_the_sweep_queue(capsys):
    with override_settings(DURABLE={"TRANSPORT": "celery", "FLEET_CHECK": False}):
        advertise("host:1:abc", ["durable"])
        call_command("durable_workers")
        assert "no live worker consumes the sweep queue 'durable.sweeps'" in capsys.readouterr().out
        advertise("host:2:def", ["durable.sweeps"])
        call_command("durable_workers")
        assert "sweep queue" not in capsys.readouterr().out


class FlakyFleetStore:
    """A store whose first advertisement fails (the database is still starting up), then works."""

    def __init__(self) -> None:
        import threading

        self.calls = 0
        self.advertised = threading.Event()

    def advertise(self, desc: dict, now: object, expires: object) -> None:
        self.calls += 1
        if self.calls == 1:
            from django.db import OperationalError

            raise OperationalError("FATAL:  the database system is starting up")
        self.advertised.set()

    def refresh_worker(self, worker_id: str, now: object, expires: object) -> bool:
        return False  # no descriptor yet: the heartbeat advertises it

    def retire_worker(self, worker_id: str) -> None:
        return None


def test_a_worker_that_starts_while_the_database_is_down_advertises_once_it_is_back():
    """Found by the chaos suite: the first advertisement failed, so its heartbeat never started.

    The worker then served its queues without a descriptor, and every run that
    needed one of its steps was blocked (``no_capable_worker``) for good.
    """
    from durable.engine.clock import SystemClock
    from durable.fleet import Advertiser

    store = FlakyFleetStore()
    advertiser = Advertiser(store, "w1", ["remote"], 0.3, registry=runtime.registry, clock=SystemClock())
    advertiser.start()  # must not raise: the worker goes on starting
    try:
        assert store.advertised.wait(60), "the heartbeat never advertised the worker"
    finally:
        advertiser.stop()
    assert store.calls >= 2
