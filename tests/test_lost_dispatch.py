"""Lost-dispatch recovery with no settings at all: every message a step or turn can lose is sent again.

The broker here is a list (:class:`Broker`): what the engine dispatches is
queued, :meth:`Broker.lose` drops everything queued (a Redis ``FLUSHALL``
or restart), :meth:`Broker.deliver` hands each message to a worker as the
Celery tasks do. The sweeps run as Celery beat runs them (announce only,
``execute=False``), under a fake clock. Every path a step takes through the
broker is covered: the first dispatch, a retry after a failure, a step with
``timeout=``, a fan-out, a retry after a lost worker, a child's first turn;
and a step only queued behind a backlog, sent twice, still runs once.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import durable
from durable import runtime
from durable.models import Checkpoint, Run
from durable.runtime import get_engine
from durable.testing import fake_clock
from durable.transports.manual import ManualTransport
from durable.worker import tick

# transaction=True: dispatches happen on commit, as in production.
pytestmark = pytest.mark.django_db(transaction=True)

calls: Counter[str] = Counter()


class Broker:
    """Messages the engine dispatched, not yet delivered: ("turn", run_id) or ("step", run_id, seq)."""

    def __init__(self) -> None:
        self.queued: list[tuple[Any, ...]] = []

    def lose(self) -> list[tuple[Any, ...]]:
        lost, self.queued = self.queued, []
        return lost

    def deliver(self, rounds: int = 20) -> int:
        """Deliver what is queued, then what that queued, for up to ``rounds`` rounds; how many.

        With the default, until the broker is empty (it fails if messages keep flowing).
        """
        engine, done = get_engine(), 0
        for _ in range(rounds):
            batch = self.lose()
            if not batch:
                return done
            for message in batch:
                if message[0] == "turn":
                    engine.run_turn(message[1])
                else:
                    engine.execute_step(message[1], message[2])
            done += len(batch)
        if rounds == 20 and self.queued:
            raise AssertionError(f"messages still flowing after {rounds} rounds: {self.queued}")
        return done

    def lose_steps(self) -> list[tuple[Any, ...]]:
        """Lose everything queued (a turn's delayed fallback wake too); the step messages lost."""
        return [m for m in self.lose() if m[0] == "step"]

    def steps(self) -> list[int]:
        return sorted(m[2] for m in self.queued if m[0] == "step")


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Broker:
    b = Broker()
    monkeypatch.setattr(
        ManualTransport,
        "dispatch_turn",
        lambda self, run_id, delay=0.0, namespace=None: b.queued.append(("turn", run_id)),
    )
    monkeypatch.setattr(
        ManualTransport,
        "dispatch_step",
        lambda self, run_id, seq, queue, delay=0.0, namespace=None: b.queued.append(("step", run_id, seq)),
    )
    return b


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


def sweep() -> dict[str, int]:
    """One beat: the sweeps announce what is due (they execute nothing themselves)."""
    return tick(get_engine(), execute=False)


def window() -> timedelta:
    """The default lost-dispatch window (``STEP_LEASE``): it must be on with no settings at all."""
    seconds = get_engine().settings.step_lease
    assert seconds is not None, "lost-dispatch recovery is off by default"
    return timedelta(seconds=seconds)


@durable.step(name="ld_once")
def ld_once(x: int) -> int:
    calls["ld_once"] += 1
    return x + 1


@durable.step(name="ld_bounded", timeout="1h")
def ld_bounded(x: int) -> int:
    calls["ld_bounded"] += 1
    return x * 10


@durable.step(name="ld_flaky", retries=1, backoff="10s")
def ld_flaky(x: int) -> int:
    calls["ld_flaky"] += 1
    if calls["ld_flaky"] == 1:
        raise RuntimeError("first attempt fails")
    return x - 1


@durable.workflow(name="ld_one")
def ld_one(ctx, data):
    name, x = data
    return ctx.step(name, x)


@durable.workflow(name="ld_fan")
def ld_fan(ctx, xs):
    return ctx.gather(*[durable.call(ld_once, x) for x in xs])


@durable.workflow(name="ld_parent")
def ld_parent(ctx, x):
    return ctx.child(ld_one, ["ld_once", x])


def _steps(run_id: str) -> list[tuple[int, str, int]]:
    rows = Checkpoint.objects.filter(run_id=run_id, kind="step").order_by("seq")
    return list(rows.values_list("seq", "status", "attempts"))


def _status(run_id: str) -> str:
    return Run.objects.get(id=run_id).status


@pytest.mark.parametrize(("name", "output"), [("ld_once", 8), ("ld_bounded", 70)], ids=["plain", "with_timeout"])
def test_a_lost_first_dispatch_is_sent_again_after_the_window(broker, name, output):
    with fake_clock() as fc:
        run_id = durable.start(ld_one, [name, 7])
        assert broker.deliver(rounds=1) == 1  # the first turn: it dispatches step 1
        assert broker.lose_steps() == [("step", run_id, 1)]  # the broker is flushed
        fc.advance(window() - timedelta(seconds=1))
        sweep()
        assert broker.queued == []  # not yet: a step may wait in its queue that long
        fc.advance("2s")
        assert sweep()["redispatched"] == 1
        broker.deliver()
    assert (_status(run_id), Run.objects.get(id=run_id).output) == ("completed", output)
    assert (_steps(run_id), calls[name]) == ([(1, "completed", 1)], 1)


def test_a_lost_retry_is_sent_again_when_due(broker):
    with fake_clock() as fc:
        run_id = durable.start(ld_one, ["ld_flaky", 7])
        broker.deliver(rounds=2)  # turn, step attempt 1 fails; its retry (due in 10s) is queued...
        assert broker.lose_steps() == [("step", run_id, 1)]  # ...and lost
        fc.advance("10s")
        assert sweep()["redispatched"] == 1
        broker.deliver()
    assert (_status(run_id), calls["ld_flaky"], _steps(run_id)) == ("completed", 2, [(1, "completed", 2)])


def test_a_lost_fan_out_is_sent_again_step_by_step(broker):
    with fake_clock() as fc:
        run_id = durable.start(ld_fan, [1, 2, 3])
        broker.deliver(rounds=1)  # the first turn dispatches the three steps
        assert broker.steps() == [1, 2, 3]
        broker.queued = [m for m in broker.lose() if m == ("step", run_id, 1)]  # two of them are lost
        broker.deliver()
        assert _steps(run_id) == [(1, "completed", 1), (2, "pending", 0), (3, "pending", 0)]
        fc.advance(window() + timedelta(seconds=1))
        assert sweep()["redispatched"] == 2
        broker.deliver()
    assert (_status(run_id), Run.objects.get(id=run_id).output) == ("completed", [2, 3, 4])
    assert calls["ld_once"] == 3
    assert _steps(run_id) == [(1, "completed", 1), (2, "completed", 1), (3, "completed", 1)]


@durable.step(name="ld_retried", retries=1, backoff="5s")
def ld_retried(x: int) -> int:
    calls["ld_retried"] += 1
    return -x


def test_a_lost_retry_after_a_lost_worker_is_sent_again_when_due(broker):
    with fake_clock() as fc:
        run_id = durable.start(ld_one, ["ld_retried", 4])
        broker.deliver(rounds=1)
        assert broker.lose_steps() == [("step", run_id, 1)]
        now = runtime.now()
        lease = timedelta(seconds=get_engine().settings.step_execution_lease)
        assert get_engine().store.claim_step(run_id, 1, "doomed", now, now + lease)  # ...and its worker died
        fc.advance(lease + timedelta(seconds=1))
        assert sweep()["steps_recovered"] == 1
        assert ("step", run_id, 1) in broker.lose()  # the retry's message is lost as well
        fc.advance("5s")
        assert sweep()["redispatched"] == 1
        broker.deliver()
    assert (_status(run_id), calls["ld_retried"], _steps(run_id)) == ("completed", 1, [(1, "completed", 2)])


def test_a_lost_first_turn_of_a_child_is_sent_again(broker):
    with fake_clock():
        parent = durable.start(ld_parent, 1)
        broker.deliver(rounds=1)  # the parent's turn starts the child...
        lost = broker.lose()  # ...whose first turn is lost
        (child,) = [m[1] for m in lost if m[0] == "turn" and m[1] != parent]
        assert _status(child) == "pending"
        sweep()  # a pending run is announced by every sweep
        broker.deliver()
    assert (_status(child), _status(parent), Run.objects.get(id=parent).output) == ("completed", "completed", 2)
    assert calls["ld_once"] == 1


@durable.step(name="ld_slow")
def ld_slow(_: object) -> str:
    """While it runs, the duplicate message of its step arrives at another worker."""
    calls["ld_slow"] += 1
    info = durable.current_step()
    calls["duplicate: " + get_engine().execute_step(info.run_id, info.seq)] += 1
    return "once"


def test_a_step_queued_past_the_window_is_sent_twice_and_runs_once(broker):
    """Not lost, only queued behind a backlog: the sweep sends it again; the claim lets one run."""
    with fake_clock() as fc:
        run_id = durable.start(ld_one, ["ld_slow", None])
        broker.deliver(rounds=1)
        fc.advance(window() + timedelta(seconds=1))
        assert sweep()["redispatched"] == 1
        assert broker.steps() == [1, 1]  # the original, still queued, and the re-sent one
        broker.deliver()
    assert (_status(run_id), Run.objects.get(id=run_id).output) == ("completed", "once")
    # The first delivery ran it; the duplicate arrived mid-run (skipped), the second message after it.
    assert (calls["ld_slow"], calls["duplicate: skipped"]) == (1, 1)
    assert _steps(run_id) == [(1, "completed", 1)]


def test_an_unclaimed_step_is_sent_again_ever_more_rarely_and_never_given_up(broker):
    """Doubling spacing (capped at RECONCILE_AFTER) bounds the duplicates a long backlog piles up."""
    settings = get_engine().settings
    with fake_clock() as fc:
        run_id = durable.start(ld_one, ["ld_once", 1])
        broker.deliver(rounds=1)
        sent = []
        for _ in range(6):
            wake = Checkpoint.objects.get(run_id=run_id, seq=1).wake_at
            sent.append(round((wake - runtime.now()).total_seconds()))
            fc.advance(wake - runtime.now())
            assert sweep()["redispatched"] == 1
    first = settings.step_lease
    cap = max(first, settings.reconcile_after)
    assert sent == [first, min(2 * first, cap), min(4 * first, cap), min(8 * first, cap), cap, cap]
    assert _steps(run_id) == [(1, "pending", 0)] and _status(run_id) == "suspended"
    assert broker.steps() == [1] * 7


def test_a_step_given_up_after_step_redispatch_max_fails_with_remote_step_lost(broker, settings):
    settings.DURABLE = {**settings.DURABLE, "STEP_REDISPATCH_MAX": 2}
    with fake_clock() as fc:
        run_id = durable.start(ld_one, ["ld_once", 1])
        broker.deliver(rounds=1)
        for _ in range(3):
            fc.advance(Checkpoint.objects.get(run_id=run_id, seq=1).wake_at - runtime.now())
            counts = sweep()
        assert counts["lost"] == 1
        broker.deliver()
    run = Run.objects.get(id=run_id)
    assert (run.status, run.error["step"]["error"]["code"], calls["ld_once"]) == ("failed", "remote_step_lost", 0)
