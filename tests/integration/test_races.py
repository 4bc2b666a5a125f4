"""Races around orphan recovery, with real workers killed mid-turn.

An orphan is made for real: a worker is SIGKILLed while a turn of the run is
inside a local step, leaving the run ``running`` under a lease nobody renews.
Sweepers are called from threads of the test process (each thread its own
database connection, each sweeper its own engine identity, as on two machines);
precise interleavings are forced by wrapping a store method, never by sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

import durable
from durable import conf, runtime
from durable import worker as sweeps
from durable.engine.core import Engine
from durable.models import Checkpoint, Run
from durable.runtime import get_engine
from durable.store import DjangoStore, store
from durable.transports.celery import CeleryTransport
from tests.integration.harness import SETTLE, account, lapse_leases_of, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def concurrently(*fns: Callable[[], Any]) -> list[Any]:
    """Run each ``fn`` in its own thread (own DB connection), released together; return results."""
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def body(i: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=SETTLE)
            results[i] = fn()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i, fn), daemon=True) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=2 * SETTLE)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    if errors:
        raise errors[0]
    return results


def sweeper_engine(owner: str) -> Engine:
    """An engine as a sweeper on another machine would have: its own lease identity."""
    return Engine(store, CeleryTransport(), conf.get(), registry=runtime.registry, clock=runtime.clock, owner=owner)


def make_orphans(cluster, n: int, *, gate: str | None = None) -> list[str]:
    """Start ``n`` it.orphan runs on worker A, kill -9 A mid-turn, and let their leases lapse.

    The leases lapse explicitly (written into the past): the workers' leases outlast any test.

    A second worker B (durable + alpha) is up when this returns, to take recovered turns.
    """
    (a,) = cluster.workers(("A", ["durable", "alpha"]), concurrency=n)
    runs = [durable.start("it.orphan", {"x": i, "gate": gate}, run_id=f"orphan-{i}") for i in range(n)]
    wait_until(
        lambda: len(cluster.executions(kind="local")) == n,
        f"{n} turns to hang inside their local step",
        diagnostics=cluster.diagnostics,
    )
    assert {e["pid"] for e in cluster.executions(kind="local")} == {a.pid}
    assert set(Run.objects.filter(id__in=runs).values_list("status", flat=True)) == {"running"}
    a.kill9()
    b = cluster.spawn_worker("B", ["durable", "alpha"])
    assert lapse_leases_of(a) == n
    assert Run.objects.filter(id__in=runs, status="running", locked_until__lt=timezone.now()).count() == n
    cluster.wait_ready(b)
    return runs


def local_executions(cluster, run: str) -> int:
    return len(cluster.executions(run, kind="local"))


def test_two_sweepers_racing_recover_each_orphan_exactly_once(cluster, monkeypatch):
    runs = make_orphans(cluster, 3)
    listed: list[list[str]] = []
    both_listed = threading.Barrier(2)
    original = DjangoStore.orphans

    def orphans_then_wait(self, now, limit):
        # Both sweepers see every orphan before either takes one: a real race on each run.
        found = original(self, now, limit)
        listed.append(sorted(found))
        both_listed.wait(timeout=SETTLE)
        return found

    monkeypatch.setattr(DjangoStore, "orphans", orphans_then_wait)
    one, two = sweeper_engine("sweeper-1"), sweeper_engine("sweeper-2")
    results = concurrently(
        lambda: sweeps.recover_orphans(one, execute=False),
        lambda: sweeps.recover_orphans(two, execute=False),
    )
    monkeypatch.setattr(DjangoStore, "orphans", original)

    assert listed == [sorted(runs), sorted(runs)]
    assert sum(r["recovered"] for r in results) == 3, results
    assert sum(r["dead"] for r in results) == 0, results
    assert dict(Run.objects.filter(id__in=runs).values_list("id", "recovery_attempts")) == dict.fromkeys(runs, 1)

    wait_until(
        lambda: set(Run.objects.filter(id__in=runs).values_list("status", flat=True)) == {"completed"},
        "the recovered runs to complete",
        diagnostics=cluster.diagnostics,
    )
    acc = account(cluster, runs)
    assert acc.completed() == 3
    for i, run in enumerate(runs):
        assert acc.output[run] == i + 1
        assert [(seq, kind, name, status) for seq, kind, name, status, _ in acc.checkpoints[run]] == [
            (1, "local", "hang", "completed"),
            (2, "step", "alpha.inc", "completed"),
        ]
        # The local step ran in the killed turn and once more in the one recovered turn.
        assert local_executions(cluster, run) == 2
        assert acc.executions[(run, 2)] == [1]
        assert acc.step_attempts(run) == {2: 1}
    assert dict(Run.objects.filter(id__in=runs).values_list("id", "recovery_attempts")) == dict.fromkeys(runs, 1)


@pytest.mark.parametrize("moment", ["during-takeover", "during-recovered-turn", "unforced"])
def test_cancel_racing_orphan_recovery_stays_cancelled(cluster, monkeypatch, tmp_path, moment):
    """However a cancel interleaves with the recovery of an orphan, the run ends cancelled.

    * during-takeover: the cancel commits after the sweeper took the expired lease
      and before it hands the run back for a new turn;
    * during-recovered-turn: the cancel commits while the recovered turn runs on a
      worker, which then loses its lease and writes nothing;
    * unforced: three orphans, a sweeper and a canceller released together.

    In every case no step ever runs and later sweeps leave the run cancelled.
    """
    gate = tmp_path / "gate"
    n = 3 if moment == "unforced" else 1
    runs = make_orphans(cluster, n, gate=str(gate))
    engine = get_engine()

    if moment == "during-takeover":
        cancelled: list[bool] = []
        original = DjangoStore.recover_orphan

        def recover_then_cancel(self, run_id, *args, **kwargs):
            got = original(self, run_id, *args, **kwargs)
            cancelled.extend(concurrently(lambda: durable.cancel(run_id)))
            return got

        monkeypatch.setattr(DjangoStore, "recover_orphan", recover_then_cancel)
        counts = sweeps.recover_orphans(engine, execute=False)
        monkeypatch.setattr(DjangoStore, "recover_orphan", original)
        assert counts == {"recovered": 1, "dead": 0}
        assert cancelled == [True]
        gate.touch()
    elif moment == "during-recovered-turn":
        (run,) = runs
        assert sweeps.recover_orphans(engine, execute=False) == {"recovered": 1, "dead": 0}
        wait_until(
            lambda: local_executions(cluster, run) == 2,
            "the recovered turn to run on worker B",
            diagnostics=cluster.diagnostics,
        )
        assert durable.cancel(run) is True
        gate.touch()
        wait_until(
            lambda: [line for line in cluster.task_log_lines("durable.run_turn[") if line.rstrip().endswith("'lost'")],
            "the recovered turn to end with its lease lost",
            diagnostics=cluster.diagnostics,
        )
    else:
        results = concurrently(
            lambda: sweeps.recover_orphans(sweeper_engine("sweeper-1"), execute=False),
            *[lambda run=run: durable.cancel(run) for run in runs],
        )
        assert results[1:] == [True] * n  # nothing can finish before the gate opens
        assert results[0]["dead"] == 0 and results[0]["recovered"] <= n
        gate.touch()

    sweeper = cluster.sweeper()
    sweeper.wait_ticks(8)  # rounds of sweeps: recovery, wakes, lost steps
    acc = account(cluster, runs)
    assert acc.status == dict.fromkeys(runs, "cancelled")
    assert not Checkpoint.objects.filter(run_id__in=runs, kind="step").exists()
    assert cluster.executions() == []  # no step ever ran
    for run in Run.objects.filter(id__in=runs):
        assert run.locked_by is None and run.finished_at is not None
        assert run.recovery_attempts <= 1
