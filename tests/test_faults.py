"""Fault injection on PostgreSQL: killed workers, racing callers, lost and duplicate messages.

Every test commits for real (``transaction=True``) and races real connections
(threads, ``manage.py durable_worker`` subprocesses). Crashes are simulated by
SIGKILL of a worker, by :class:`tests.fault_workflows.Crash` (a BaseException
that escapes the engine mid-turn, leaving the run ``running`` under a lease
nobody renews), or by a store write that fails once. Precise interleavings are
forced with hooks on the store, run in another thread (its own connection),
rather than hoped for with sleeps. Step executions are counted in files so a
count survives the process that made it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import OperationalError, connections, transaction
from django.db.models.query import QuerySet
from django.test import override_settings

import durable
from durable import conf, runtime
from durable import worker as sweeps
from durable.engine.core import Engine
from durable.engine.leases import LeaseKeeper
from durable.models import BufferedSignal, Checkpoint, Run, RunStatus, SignalWaiter
from durable.runtime import get_engine
from durable.store import store
from durable.testing import fake_clock, run_until_settled
from durable.transports.manual import ManualTransport
from tests import fault_workflows as fw
from tests.threads import concurrently, in_other_thread

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parent.parent
SETTLE = 60.0  # seconds an in-process wait may take before the test fails (only a stuck one does)
PROCESS_SETTLE = 90.0  # the same for waits on a worker subprocess (Django start-up on a loaded CI box)


# -- helpers -------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], bool], what: str, *, timeout: float = SETTLE, diagnostics: Callable[[], str] = lambda: ""
) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` real seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}\n{diagnostics()}")
        time.sleep(0.01)


NAP = [(1, "sleep", "sleep", "completed")]  # the sleep that ends a run's first turn (``nap``)


def history(*names: str, first: int = 2) -> list[tuple[int, str, str, str]]:
    """Checkpoints of completed local steps ``names``, recorded from position ``first`` on."""
    return [(first + i, "local", name, "completed") for i, name in enumerate(names)]


def checkpoints(run_id: str) -> list[tuple[int, str, str, str]]:
    return list(Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "kind", "name", "status"))


def assert_one_checkpoint_per_seq(run_id: str, count: int) -> None:
    per_seq = Counter(Checkpoint.objects.filter(run_id=run_id).values_list("seq", flat=True))
    assert sorted(per_seq) == list(range(1, count + 1))
    assert set(per_seq.values()) == {1}


def sweeper(i: int) -> Engine:
    """An engine with its own identity, as another machine running the sweeps would have."""
    return Engine(
        store,
        ManualTransport(),
        conf.get(),
        registry=runtime.registry,
        clock=runtime.clock,
        owner=f"sweeper-{i}",
        keeper=LeaseKeeper(),
    )


def crash_mid_turn(run_id: str) -> Run:
    """Run a turn that dies inside step B; return the run as the crash left it."""
    with pytest.raises(fw.Crash):
        get_engine().run_turn(run_id)
    row = Run.objects.get(id=run_id)
    assert row.status == RunStatus.RUNNING
    assert row.locked_by == get_engine().owner
    assert row.locked_until is not None and row.locked_until > runtime.now()
    return row


def orphan_three_locals(
    tmp_path: Path,
    run_id: str,
    clock: Any,
    *,
    crash_always: bool = False,
    release: Path | None = None,
    first_turn: bool = False,
) -> tuple[str, Run]:
    """Start fault_three_locals and crash the turn running A and B inside B.

    Returns (log path, run row). By default the run first sleeps one (fake)
    second, so the crash hits its second turn; ``first_turn`` crashes the first.
    With ``release``, B re-run after a recovery blocks until that file exists.
    """
    log = tmp_path / f"{run_id}.log"
    marker = tmp_path / f"{run_id}.crash"
    marker.touch()
    inp: dict[str, Any] = {"log": str(log), "crash": str(marker), "crash_always": crash_always}
    if release is not None:
        inp["release"] = str(release)
    if not first_turn:
        inp["nap"] = 1
    durable.start(fw.three_locals, inp, run_id=run_id)
    if not first_turn:
        assert get_engine().run_turn(run_id) == "suspended"
        clock.advance("1s")
    row = crash_mid_turn(run_id)
    assert checkpoints(run_id) == (history("A", first=1) if first_turn else [*NAP, *history("A")])
    assert (fw.executions(log, "A"), fw.executions(log, "B")) == (1, 1)
    return str(log), row


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return f"--- worker output ({self.log}) ---\n" + self.log.read_text(errors="replace")


@pytest.fixture
def spawn_worker(tmp_path: Path):
    """Start ``manage.py durable_worker`` processes on the test database; kill leftovers."""
    started: list[tuple[Worker, Any]] = []

    def spawn(tag: str) -> Worker:
        db = settings.DATABASES["default"]
        auth = quote(db["USER"] or "postgres")
        if db.get("PASSWORD"):
            auth += ":" + quote(db["PASSWORD"])
        url = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.fault_settings",
            "DATABASE_URL": url,
            "PYTHONUNBUFFERED": "1",
        }
        path = tmp_path / f"{tag}.out"
        out = path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "durable_worker", "--interval", "0.05"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        worker = Worker(proc, path)
        started.append((worker, out))
        return worker

    yield spawn
    for worker, out in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
        worker.proc.wait(timeout=10)
        out.close()


# -- 1. a crash in the middle of a turn ----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("turn", ["first", "later"])
def test_worker_killed_mid_step_is_recovered_once_and_reruns_only_that_step(tmp_path, spawn_worker, turn):
    """SIGKILL while step B runs in the run's first turn, or in a later one (after a short sleep)."""
    log, release = tmp_path / "exec.log", tmp_path / "release"
    inp: dict[str, Any] = {"log": str(log), "release": str(release)}
    prefix, first = ([], 1) if turn == "first" else (NAP, 2)
    if turn == "later":
        inp["nap"] = 0.2
    run_id = durable.start(fw.three_locals, inp, run_id=f"killed-in-{turn}-turn")
    worker = spawn_worker("worker")
    wait_for(
        lambda: fw.executions(log, "B") == 1,
        "the worker to block inside step B",
        timeout=PROCESS_SETTLE,
        diagnostics=worker.output,
    )

    worker.proc.send_signal(signal.SIGKILL)
    assert worker.proc.wait(timeout=10) == -signal.SIGKILL

    row = Run.objects.get(id=run_id)
    assert row.status == RunStatus.RUNNING  # nobody released it: the process is gone
    assert row.locked_by is not None and row.locked_by != get_engine().owner
    assert checkpoints(run_id) == [*prefix, *history("A", first=first)]
    release.touch()  # the re-run of B will not block

    engine = get_engine()
    # Time stands a moment before the dead worker's lease runs out, however long it took to get here.
    with fake_clock(start=row.locked_until - timedelta(seconds=1)) as clock:
        # The dead worker's lease has not run out yet: not an orphan.
        assert sweeps.recover_orphans(engine) == {"recovered": 0, "dead": 0}
        assert Run.objects.get(id=run_id).locked_by == row.locked_by
        clock.set(row.locked_until + timedelta(seconds=1))
        run = run_until_settled(run_id)

    assert (fw.executions(log, "A"), fw.executions(log, "B"), fw.executions(log, "C")) == (1, 2, 1)
    assert run.status == "completed", run.error
    assert run.output == ["A", "B", "C"]
    assert run.recovery_attempts == 1
    assert checkpoints(run_id) == [*prefix, *history("A", "B", "C", first=first)]
    assert_one_checkpoint_per_seq(run_id, len(prefix) + 3)
    assert Run.objects.filter(id=run_id, locked_by__isnull=True, locked_until__isnull=True).exists()


@pytest.mark.parametrize(
    ("when", "b_runs"),
    [("before_commit", 2), ("after_commit", 1)],
    ids=["write-lost-step-reruns", "ack-lost-step-kept"],
)
def test_failing_checkpoint_write_reruns_only_the_unrecorded_step(tmp_path, monkeypatch, when, b_runs):
    """The write of B's checkpoint fails once: B re-runs only if its result was not recorded."""
    log = tmp_path / "exec.log"
    original = store.commit
    failed: list[str] = []

    def flaky_commit(run_id, owner, now, lease_until, writes, outcome=None):
        is_b = any(w.record.name == "B" for w in writes.checkpoints)
        if is_b and not failed and when == "before_commit":
            failed.append(run_id)
            raise OperationalError("server closed the connection unexpectedly")
        ok = original(run_id, owner, now, lease_until, writes, outcome)
        if is_b and not failed and when == "after_commit":
            failed.append(run_id)
            raise OperationalError("server closed the connection unexpectedly")
        return ok

    monkeypatch.setattr(store, "commit", flaky_commit)
    with fake_clock() as clock:
        run_id = durable.start(fw.three_locals, {"log": str(log)}, run_id=f"flaky-{when}")
        run = run_until_settled(run_id)
        assert failed == [run_id]
        # The turn was abandoned and handed back (counted as a recovery), due a moment later.
        assert run.status == "suspended"
        assert run.recovery_attempts == 1
        assert Run.objects.get(id=run_id).locked_by is None
        clock.advance("2s")
        run = run_until_settled(run_id)

    assert run.status == "completed", run.error
    assert run.output == ["A", "B", "C"]
    assert run.recovery_attempts == 1
    assert (fw.executions(log, "A"), fw.executions(log, "B"), fw.executions(log, "C")) == (1, b_runs, 1)
    assert [c[3] for c in checkpoints(run_id)] == ["completed"] * 3
    assert_one_checkpoint_per_seq(run_id, 3)


# -- 2. idempotent start ---------------------------------------------------------


def test_concurrent_starts_of_one_id_create_one_run(tmp_path, monkeypatch):
    dispatched: list[str] = []
    monkeypatch.setattr(
        ManualTransport, "dispatch_turn", lambda self, run_id, delay=0.0, namespace=None: dispatched.append(run_id)
    )
    callers = 16

    ids = concurrently(callers, lambda i: durable.start(fw.echo, {"caller": i}, run_id="same"))

    assert ids == ["same"] * callers
    assert Run.objects.count() == 1
    row = Run.objects.get(id="same")
    assert row.status == RunStatus.PENDING
    assert dispatched == ["same"]  # only the creator announced it, after its commit
    winner = row.input
    assert winner in [{"caller": i} for i in range(callers)]

    # A late duplicate start changes nothing either.
    assert durable.start(fw.echo, {"caller": "late"}, run_id="same") == "same"
    run = run_until_settled("same")
    assert run.status == "completed"
    assert run.output == winner
    assert Run.objects.count() == 1
    assert_one_checkpoint_per_seq("same", 1)


def test_start_inside_rolled_back_transaction_leaves_no_run(monkeypatch):
    dispatched: list[str] = []
    monkeypatch.setattr(
        ManualTransport, "dispatch_turn", lambda self, run_id, delay=0.0, namespace=None: dispatched.append(run_id)
    )

    class BusinessWriteFailed(Exception):
        pass

    with pytest.raises(BusinessWriteFailed), transaction.atomic():
        assert durable.start(fw.echo, 1, run_id="rolled-back") == "rolled-back"
        assert Run.objects.filter(id="rolled-back").exists()  # visible to its own transaction only
        assert in_other_thread(lambda: Run.objects.filter(id="rolled-back").exists()) is False
        raise BusinessWriteFailed()

    assert not Run.objects.filter(id="rolled-back").exists()
    assert dispatched == []
    # The id is free again: a committed start creates it.
    with transaction.atomic():
        durable.start(fw.echo, 2, run_id="rolled-back")
    assert dispatched == ["rolled-back"]
    assert run_until_settled("rolled-back").output == 2


# -- 3. signals racing the wait --------------------------------------------------


def test_signal_landing_between_wait_check_and_commit_is_not_lost(monkeypatch):
    """Forced interleaving: the signal commits after the turn found the buffer empty, before its commit."""
    original = store.next_signal
    injected: list[str] = []

    def racing_next_signal(run_id, name, skip):
        got = original(run_id, name, skip)
        if got is None and run_id not in injected:
            injected.append(run_id)
            in_other_thread(lambda: durable.signal(run_id, name, {"for": run_id}))
        return got

    monkeypatch.setattr(store, "next_signal", racing_next_signal)
    for i in range(5):
        run_id = durable.start(fw.wait_one, run_id=f"forced-race-{i}")
        assert get_engine().run_turn(run_id) == "suspended"
        assert injected[-1] == run_id
        row = Run.objects.get(id=run_id)
        # The commit saw the buffered signal under the row lock and made the run due at once.
        assert row.wake_at is not None and row.wake_at <= runtime.now()
        run = run_until_settled(run_id, timeout=SETTLE)
        assert run.status == "completed"
        assert run.output == {"for": run_id}
        assert checkpoints(run_id) == [(1, "signal", "go", "completed")]
        assert not BufferedSignal.objects.filter(run_id=run_id).exists()
        assert not SignalWaiter.objects.filter(run_id=run_id).exists()


def test_signal_racing_the_registering_turn_always_wakes_the_run():
    """Free race, many times: a turn registering the wait vs a signal sent at the same moment."""
    engine = get_engine()
    rng = random.Random(1234)
    jitters = [rng.uniform(0, 0.006) for _ in range(20)]
    for i, jitter in enumerate(jitters):
        run_id = durable.start(fw.wait_one, run_id=f"free-race-{i}")

        def racer(k: int, run_id: str = run_id, jitter: float = jitter, i: int = i) -> Any:
            if k == 0:
                return engine.run_turn(run_id)
            time.sleep(jitter)  # spreads the interleavings; nothing below depends on it
            return durable.signal(run_id, "go", {"n": i})

        concurrently(2, racer)
        # A lost wake would leave the run suspended until the 5-minute reconcile:
        # run_until_settled would return it still suspended.
        run = run_until_settled(run_id, timeout=SETTLE)
        assert (run.status, run.output) == ("completed", {"n": i}), f"iteration {i}"
        assert checkpoints(run_id) == [(1, "signal", "go", "completed")]
        assert not BufferedSignal.objects.filter(run_id=run_id).exists()


def test_signal_sent_before_the_wait_is_consumed_exactly_once():
    run_id = durable.start(fw.wait_two, run_id="early-signal")
    durable.signal(run_id, "go", "first")
    run = run_until_settled(run_id)
    assert run.status == "suspended"  # the second wait must not reuse the first signal
    assert checkpoints(run_id) == [(1, "signal", "go", "completed"), (2, "signal", "go", "pending")]
    assert Checkpoint.objects.get(run_id=run_id, seq=1).output == "first"
    assert not BufferedSignal.objects.filter(run_id=run_id).exists()
    assert list(SignalWaiter.objects.filter(run_id=run_id).values_list("name", "seq")) == [("go", 2)]

    durable.signal(run_id, "go", "second")
    run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", ["first", "second"])
    assert_one_checkpoint_per_seq(run_id, 2)
    assert not SignalWaiter.objects.filter(run_id=run_id).exists()


@pytest.mark.parametrize("when", ["before_start", "while_waiting"])
def test_two_signals_of_one_name_feed_two_waits_in_order(when):
    run_id = durable.start(fw.wait_two, run_id=f"fifo-{when}")
    if when == "while_waiting":
        assert run_until_settled(run_id).status == "suspended"
        assert checkpoints(run_id) == [(1, "signal", "go", "pending")]
    durable.signal(run_id, "go", "a")
    durable.signal(run_id, "go", "b")
    run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", ["a", "b"])
    assert_one_checkpoint_per_seq(run_id, 2)
    assert not BufferedSignal.objects.filter(run_id=run_id).exists()


# -- 4. timers across a worker restart --------------------------------------------


@pytest.mark.slow
def test_timer_survives_a_killed_worker_and_fires_once_on_a_new_one(tmp_path, spawn_worker):
    log = tmp_path / "exec.log"
    # An hour: the worker dies long before the timer is due, however slow the machine.
    run_id = durable.start(fw.sleeper, {"log": str(log), "seconds": 3600}, run_id="sleep-across-restart")
    first = spawn_worker("first")
    wait_for(
        lambda: Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).exists(),
        "the first worker to suspend the run on its timer",
        timeout=PROCESS_SETTLE,
        diagnostics=first.output,
    )
    first.proc.send_signal(signal.SIGKILL)
    assert first.proc.wait(timeout=10) == -signal.SIGKILL

    row = Run.objects.get(id=run_id)
    sleep_cp = Checkpoint.objects.get(run_id=run_id, kind="sleep")
    assert (row.status, sleep_cp.status) == (RunStatus.SUSPENDED, "pending")
    assert row.wake_at == sleep_cp.wake_at
    assert row.wake_at > runtime.now(), "the worker must die before the timer is due"
    assert (fw.executions(log, "before"), fw.executions(log, "after")) == (1, 0)

    # The hour passes: the timer falls due (the run's wake and its sleep's, as they were written).
    due = runtime.now() - timedelta(seconds=1)
    Run.objects.filter(id=run_id).update(wake_at=due)
    Checkpoint.objects.filter(run_id=run_id, kind="sleep").update(wake_at=due)
    row.refresh_from_db()
    second = spawn_worker("second")
    wait_for(
        lambda: Run.objects.filter(id=run_id, status__in=[RunStatus.COMPLETED, RunStatus.FAILED]).exists(),
        "the second worker to fire the timer",
        timeout=PROCESS_SETTLE,
        diagnostics=second.output,
    )
    second.proc.send_signal(signal.SIGTERM)  # graceful drain
    assert second.proc.wait(timeout=10) == 0, second.output()

    run = durable.get_run(run_id)
    assert (run.status, run.output) == ("completed", "woke")
    assert run.finished_at >= row.wake_at
    assert run.recovery_attempts == 0  # the run was suspended, never orphaned
    assert (fw.executions(log, "before"), fw.executions(log, "after")) == (1, 1)
    assert checkpoints(run_id) == [
        (1, "local", "before", "completed"),
        (2, "sleep", "sleep", "completed"),
        (3, "local", "after", "completed"),
    ]
    assert_one_checkpoint_per_seq(run_id, 3)


# -- 5. sweepers racing over one orphan ---------------------------------------------


def test_racing_sweepers_recover_an_orphan_exactly_once(tmp_path, monkeypatch):
    sweepers = 6
    # Every sweeper lists the orphan before any of them tries to take it: all listings are stale.
    listed = threading.Barrier(sweepers)
    original_orphans = store.orphans

    def orphans_in_step(now, limit):
        got = original_orphans(now, limit)
        listed.wait(SETTLE)
        return got

    monkeypatch.setattr(store, "orphans", orphans_in_step)
    with fake_clock() as clock:
        log, row = orphan_three_locals(tmp_path, "orphan-race", clock)
        clock.set(row.locked_until + timedelta(seconds=1))
        engines = [sweeper(i) for i in range(sweepers)]

        counts = concurrently(sweepers, lambda i: sweeps.recover_orphans(engines[i]))

    assert sum(c["recovered"] for c in counts) == 1
    assert sum(c["dead"] for c in counts) == 0
    run = durable.get_run("orphan-race")
    assert (run.status, run.output) == ("completed", ["A", "B", "C"])
    assert run.recovery_attempts == 1
    assert (fw.executions(log, "A"), fw.executions(log, "B"), fw.executions(log, "C")) == (1, 2, 1)
    assert checkpoints("orphan-race") == [*NAP, *history("A", "B", "C")]
    assert_one_checkpoint_per_seq("orphan-race", 4)


def test_recovering_a_crashed_first_turn_replays_its_recorded_step(tmp_path):
    with fake_clock() as clock:
        log, row = orphan_three_locals(tmp_path, "first-turn-crash", clock, first_turn=True)
        clock.set(row.locked_until + timedelta(seconds=1))
        counts = sweeps.recover_orphans(sweeper(1))

    assert fw.executions(log, "A") == 1  # recorded before the crash: replayed, never re-run
    assert counts == {"recovered": 1, "dead": 0}
    run = durable.get_run("first-turn-crash")
    assert (run.status, run.output, run.recovery_attempts) == ("completed", ["A", "B", "C"], 1)
    assert (fw.executions(log, "B"), fw.executions(log, "C")) == (2, 1)
    assert checkpoints("first-turn-crash") == history("A", "B", "C", first=1)


def test_stale_orphan_listing_cannot_take_a_run_being_recovered(tmp_path, monkeypatch):
    """Forced interleaving: sweeper 1 acts on its listing while sweeper 0's recovered turn runs."""
    release = tmp_path / "release"
    listed = threading.Barrier(2)
    original_orphans, original_recover = store.orphans, store.recover_orphan

    def orphans_in_step(now, limit):
        got = original_orphans(now, limit)
        listed.wait(SETTLE)
        return got

    late: list[Any] = []

    def recover(run_id, owner, *args, **kwargs):
        if owner == "sweeper-1":
            # Wait until sweeper 0's recovered turn is inside B (holding the new lease).
            wait_for(lambda: fw.executions(log, "B") == 2, "sweeper 0 to re-run B")
            late.append(original_recover(run_id, owner, *args, **kwargs))
            release.touch()
            return late[-1]
        return original_recover(run_id, owner, *args, **kwargs)

    with fake_clock() as clock:
        log, row = orphan_three_locals(tmp_path, "stale-listing", clock, release=release)
        clock.set(row.locked_until + timedelta(seconds=1))
        monkeypatch.setattr(store, "orphans", orphans_in_step)
        monkeypatch.setattr(store, "recover_orphan", recover)
        engines = [sweeper(0), sweeper(1)]
        counts = concurrently(2, lambda i: sweeps.recover_orphans(engines[i]))

    assert late == [None]  # the listed run had a live lease by then: not an orphan
    assert counts == [{"recovered": 1, "dead": 0}, {"recovered": 0, "dead": 0}]
    run = durable.get_run("stale-listing")
    assert (run.status, run.output, run.recovery_attempts) == ("completed", ["A", "B", "C"], 1)
    assert (fw.executions(log, "A"), fw.executions(log, "B"), fw.executions(log, "C")) == (1, 2, 1)
    assert checkpoints("stale-listing") == [*NAP, *history("A", "B", "C")]
    assert_one_checkpoint_per_seq("stale-listing", 4)


# -- 6. cancel vs recovery, and dead-lettering -----------------------------------------


def _cancel_elsewhere(run_id: str) -> None:
    assert in_other_thread(lambda: durable.cancel(run_id)) is True


def _assert_stays_cancelled(run_id: str, log: str, clock: Any, before: list[Any]) -> None:
    """Drive every sweep far into the future: nothing more happens to the run."""
    clock.advance("1d")
    for _ in range(3):
        run = run_until_settled(run_id)
        assert run.status == "cancelled"
        assert checkpoints(run_id) == before
    assert (fw.executions(log, "A"), fw.executions(log, "B"), fw.executions(log, "C")) == (1, 1, 0)


@pytest.mark.parametrize(
    "moment",
    [
        "before_sweep",
        "after_orphan_listing",
        "after_lease_taken",
    ],
)
def test_cancel_racing_orphan_recovery_wins_and_no_step_runs(tmp_path, monkeypatch, moment):
    run_id = f"cancel-vs-recovery-{moment}"
    with fake_clock() as clock:
        log, row = orphan_three_locals(tmp_path, run_id, clock)
        clock.set(row.locked_until + timedelta(seconds=1))
        before = checkpoints(run_id)

        if moment == "before_sweep":
            _cancel_elsewhere(run_id)
        elif moment == "after_orphan_listing":
            original_orphans = store.orphans

            def orphans_then_cancel(now, limit):
                listed = original_orphans(now, limit)
                assert listed == [run_id]
                _cancel_elsewhere(run_id)  # the listing is stale from here on
                return listed

            monkeypatch.setattr(store, "orphans", orphans_then_cancel)
        else:
            original_recover = store.recover_orphan

            def recover_then_cancel(*args, **kwargs):
                got = original_recover(*args, **kwargs)
                assert got is not None and got != "dead"
                _cancel_elsewhere(run_id)  # cancel lands after the lease was taken, before the turn
                return got

            monkeypatch.setattr(store, "recover_orphan", recover_then_cancel)

        counts = sweeps.recover_orphans(sweeper(1))
        monkeypatch.undo()

        run = durable.get_run(run_id)
        assert run.status == "cancelled"
        assert checkpoints(run_id) == before  # the recovered turn (if any) wrote nothing
        assert counts["dead"] == 0
        assert run.recovery_attempts == (1 if moment == "after_lease_taken" else 0)
        assert (fw.executions(log, "A"), fw.executions(log, "C")) == (1, 0)
        assert fw.executions(log, "B") == 1  # no step ran after the cancel
        _assert_stays_cancelled(run_id, log, clock, before)


def test_cancel_racing_recovery_freely_is_final_whichever_wins(tmp_path):
    """Free race, repeated: a cancel that commits is final; a recovery that wins completes once."""
    full = [*NAP, *history("A", "B", "C")]
    outcomes: Counter[str] = Counter()
    for i in range(8):
        run_id = f"free-cancel-{i}"
        with fake_clock() as clock:
            log, row = orphan_three_locals(tmp_path, run_id, clock)
            clock.set(row.locked_until + timedelta(seconds=1))

            def racer(k: int, run_id: str = run_id) -> Any:
                return sweeps.recover_orphans(sweeper(k)) if k == 0 else durable.cancel(run_id)

            recovered, cancelled = concurrently(2, racer)
            run = durable.get_run(run_id)
            assert run.recovery_attempts == recovered["recovered"] <= 1
            if cancelled:
                outcomes["cancelled"] += 1
                assert (run.status, run.output) == ("cancelled", None)
                # The recovered turn may have committed steps before the cancel, never after it.
                kept = checkpoints(run_id)
                assert kept == full[: len(kept)] and len(kept) >= 2
                clock.advance("1d")
                assert run_until_settled(run_id).status == "cancelled"
                assert checkpoints(run_id) == kept
                assert fw.executions(log, "A") == 1
                assert fw.executions(log, "C") <= 1
                assert fw.executions(log, "B") <= 2
            else:
                outcomes["completed"] += 1
                assert recovered["recovered"] == 1
                assert (run.status, run.output) == ("completed", ["A", "B", "C"])
                assert checkpoints(run_id) == full
                assert (fw.executions(log, "A"), fw.executions(log, "B"), fw.executions(log, "C")) == (1, 2, 1)
    assert sum(outcomes.values()) == 8


def test_run_orphaned_too_often_goes_dead(tmp_path):
    with override_settings(DURABLE={**settings.DURABLE, "MAX_RECOVERY_ATTEMPTS": 2}):
        with fake_clock() as clock:
            log, row = orphan_three_locals(tmp_path, "dead-letter", clock, crash_always=True)
            for attempt in (1, 2):
                clock.set(row.locked_until + timedelta(seconds=1))
                with pytest.raises(fw.Crash):  # recovered, and the recovered turn dies again
                    sweeps.recover_orphans(sweeper(attempt))
                row = Run.objects.get(id="dead-letter")
                assert (row.status, row.recovery_attempts) == (RunStatus.RUNNING, attempt)
                assert row.locked_by == f"sweeper-{attempt}"

            clock.set(row.locked_until + timedelta(seconds=1))
            assert sweeps.recover_orphans(sweeper(3)) == {"recovered": 0, "dead": 1}
            run = durable.get_run("dead-letter")
            assert run.status == "dead"
            assert run.error["code"] == "max_recovery_attempts"
            assert run.recovery_attempts == 3
            assert Run.objects.filter(id="dead-letter", locked_by__isnull=True).exists()

            clock.advance("1d")
            assert run_until_settled("dead-letter").status == "dead"
    assert fw.executions(log, "A") == 1
    assert fw.executions(log, "B") == 3  # the crashed turn and two recoveries; none after dead
    assert checkpoints("dead-letter") == [*NAP, *history("A")]


def test_dead_letter_write_loses_to_a_concurrent_cancel(tmp_path, monkeypatch):
    with override_settings(DURABLE={**settings.DURABLE, "MAX_RECOVERY_ATTEMPTS": 1}):
        with fake_clock() as clock:
            log, row = orphan_three_locals(tmp_path, "dead-vs-cancel", clock, crash_always=True)
            clock.set(row.locked_until + timedelta(seconds=1))
            with pytest.raises(fw.Crash):
                sweeps.recover_orphans(sweeper(1))
            row = Run.objects.get(id="dead-vs-cancel")
            assert row.recovery_attempts == 1
            clock.set(row.locked_until + timedelta(seconds=1))

            # The cancel commits after the sweep decided "dead" and right before it writes it.
            original_update = QuerySet.update
            fired: list[bool] = []

            def update(self, **kwargs):
                if self.model is Run and kwargs.get("status") == RunStatus.DEAD and not fired:
                    fired.append(True)
                    _cancel_elsewhere("dead-vs-cancel")
                return original_update(self, **kwargs)

            monkeypatch.setattr(QuerySet, "update", update)
            counts = sweeps.recover_orphans(sweeper(2))
            monkeypatch.undo()

    assert fired == [True]
    assert counts == {"recovered": 0, "dead": 0}
    run = durable.get_run("dead-vs-cancel")
    assert run.status == "cancelled"
    assert run.error is None
    assert run.recovery_attempts == 1
    assert (fw.executions(log, "A"), fw.executions(log, "B")) == (1, 2)
    assert checkpoints("dead-vs-cancel") == [*NAP, *history("A")]


# -- 7. late and duplicate step results ----------------------------------------------


def test_late_step_result_for_cancelled_run_is_ignored(tmp_path):
    log = tmp_path / "exec.log"
    engine = get_engine()
    with fake_clock() as clock:
        run_id = durable.start(fw.remote_then_local, {"log": str(log), "value": 21}, run_id="late-result")
        assert engine.run_turn(run_id) == "suspended"
        assert checkpoints(run_id) == [(1, "step", "fault_remote", "pending")]

        # A worker picks the step up; the run is cancelled while the step runs.
        fw.hooks["remote"] = lambda: _cancel_elsewhere(run_id)
        try:
            assert engine.execute_step(run_id, 1) == "completed"
        finally:
            fw.hooks.clear()

        run = durable.get_run(run_id)
        assert (run.status, run.output) == ("cancelled", None)
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        assert (cp.status, cp.output) == ("running", None)  # the late result was dropped

        # A result re-delivered later is dropped too, and the step is not run again.
        assert store.finish_step(run_id, 1, clock.now(), output=42) is False
        assert engine.execute_step(run_id, 1) == "skipped"
        clock.advance("1d")  # past the step's execution lease: the sweeps see a vanished worker
        assert run_until_settled(run_id).status == "cancelled"

    assert fw.executions(log, "remote") == 1
    assert fw.executions(log, "after") == 0
    assert Checkpoint.objects.get(run_id=run_id, seq=1).output is None
    assert_one_checkpoint_per_seq(run_id, 1)


def test_duplicate_step_result_keeps_one_checkpoint_and_still_resumes(tmp_path):
    log = tmp_path / "exec.log"
    engine = get_engine()
    with fake_clock() as clock:
        run_id = durable.start(fw.remote_then_local, {"log": str(log), "value": 21}, run_id="dup-result")
        assert engine.run_turn(run_id) == "suspended"
        assert store.finish_step(run_id, 1, clock.now(), output=42) is True
        # The duplicate finds the checkpoint settled: the first outcome stays, the run is re-woken.
        assert store.finish_step(run_id, 1, clock.now(), output=99) is True
        assert store.finish_step(run_id, 1, clock.now(), error={"message": "late failure"}) is True
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        assert (cp.status, cp.output, cp.error) == ("completed", 42, None)
        run = run_until_settled(run_id)

    assert (run.status, run.output) == ("completed", 42)
    assert fw.executions(log, "remote") == 0  # results were delivered; the step never ran here
    assert fw.executions(log, "after") == 1
    assert_one_checkpoint_per_seq(run_id, 2)


def _land_result_during_reconcile_turn(monkeypatch, run_id: str, clock: Any) -> str:
    """Run a reconcile turn during which a worker executes the step and reports its result.

    Returns what the worker's ``execute_step`` returned.
    """
    engine = get_engine()
    clock.advance(engine.settings.reconcile_after + 1)  # the reconcile fallback falls due
    original_load, original_delta = store.load_checkpoints, store.load_delta
    delivered: list[str] = []

    def deliver(rid: str, snapshot: Any) -> Any:
        if rid == run_id and not delivered:
            delivered.append(in_other_thread(lambda: engine.execute_step(rid, 1)))
        return snapshot

    # The turn's snapshot (step 1 still pending), read whole or (history cache) as the changes since.
    monkeypatch.setattr(store, "load_checkpoints", lambda rid: deliver(rid, original_load(rid)))
    monkeypatch.setattr(store, "load_delta", lambda rid, *args: deliver(rid, original_delta(rid, *args)))
    try:
        assert engine.run_turn(run_id) == "suspended"  # replayed its stale snapshot
    finally:
        monkeypatch.setattr(store, "load_checkpoints", original_load)
        monkeypatch.setattr(store, "load_delta", original_delta)
    assert len(delivered) == 1
    assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "completed"
    return delivered[0]


def test_redelivered_step_after_a_lost_resume_redrives_the_run_without_rerunning(tmp_path, monkeypatch):
    """Edge case 11: the first result's resume is lost; the re-delivery must re-drive the run."""
    log = tmp_path / "exec.log"
    engine = get_engine()
    with fake_clock() as clock:
        run_id = durable.start(fw.remote_then_local, {"log": str(log), "value": 5}, run_id="lost-resume")
        assert engine.run_turn(run_id) == "suspended"
        # The first delivery's result lands while a turn runs; that turn suspends again.
        assert _land_result_during_reconcile_turn(monkeypatch, run_id, clock) == "completed"
        assert fw.executions(log, "remote") == 1

        # Re-delivery of the same step id: nothing to claim, the step does not run again,
        # but the settled result re-drives the resume (inline, in this call).
        assert engine.execute_step(run_id, 1) == "skipped"
        run = durable.get_run(run_id)

    assert (run.status, run.output) == ("completed", 10)
    assert fw.executions(log, "remote") == 1
    assert fw.executions(log, "after") == 1
    assert_one_checkpoint_per_seq(run_id, 2)


def test_duplicate_step_delivery_runs_the_step_once(tmp_path):
    log = tmp_path / "exec.log"
    engine = get_engine()
    run_id = durable.start(fw.remote_then_local, {"log": str(log), "value": 4}, run_id="dup-delivery")
    assert engine.run_turn(run_id) == "suspended"
    assert engine.execute_step(run_id, 1) == "completed"  # runs, settles, and resumes inline
    assert durable.get_run(run_id).status == "completed"
    assert engine.execute_step(run_id, 1) == "skipped"  # the broker delivers it again
    run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", 8)
    assert (fw.executions(log, "remote"), fw.executions(log, "after")) == (1, 1)
    assert_one_checkpoint_per_seq(run_id, 2)


def _lock_waiters() -> int:
    """Sessions of this database (other than ours) blocked on a row or transaction lock."""
    with connections["default"].cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")  # activity is otherwise frozen per transaction
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cur.fetchone()[0]


def _activity() -> str:
    with connections["default"].cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(
            "SELECT pid, state, wait_event_type, wait_event, left(query, 120) FROM pg_stat_activity "
            "WHERE datname = current_database()"
        )
        return "\n".join(map(str, cur.fetchall()))


def test_duplicate_delivery_racing_the_step_result_does_not_deadlock(tmp_path):
    """Forced interleaving: the result holds the run row; a re-delivery claims meanwhile.

    A third session holds the checkpoint row, so the result write stops right
    after taking the run row; the re-delivery's claim then queues on the same
    checkpoint row. Neither may wait on the other once the row is released.
    """
    log = tmp_path / "exec.log"
    engine = get_engine()
    run_id = durable.start(fw.remote_then_local, {"log": str(log), "value": 7}, run_id="claim-vs-result")
    assert engine.run_turn(run_id) == "suspended"
    now = runtime.now()
    assert store.claim_step(run_id, 1, "worker-1", now, now + timedelta(minutes=1)) is not None

    held, release = threading.Event(), threading.Event()

    def hold_checkpoint() -> None:
        with transaction.atomic():
            Checkpoint.objects.select_for_update().get(run_id=run_id, seq=1)
            held.set()
            release.wait(SETTLE)

    box: dict[str, Any] = {}

    def in_thread(key: str, fn: Any) -> threading.Thread:
        def body() -> None:
            try:
                box[key] = fn()
            except BaseException as exc:
                box[key + "_error"] = exc
            finally:
                connections.close_all()

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        return thread

    holder = in_thread("hold", hold_checkpoint)
    assert held.wait(SETTLE)
    result = in_thread("woke", lambda: store.finish_step(run_id, 1, runtime.now(), output=14))
    wait_for(lambda: _lock_waiters() >= 1, "the result to block on the checkpoint row", diagnostics=_activity)
    redelivery = in_thread("redelivery", lambda: engine.execute_step(run_id, 1, continue_turn=False))
    wait_for(
        lambda: _lock_waiters() >= 2 or not redelivery.is_alive(),
        "the re-delivery to claim or block",
        diagnostics=_activity,
    )
    release.set()
    for thread in (holder, result, redelivery):
        thread.join(SETTLE)
        assert not thread.is_alive(), f"a session hung:\n{_activity()}"
    assert not [k for k in box if k.endswith("_error")], box
    assert box["woke"] is True
    assert box["redelivery"] == "skipped"
    run = run_until_settled(run_id)
    assert (run.status, run.output) == ("completed", 14)
    assert fw.executions(log, "remote") == 0
    assert_one_checkpoint_per_seq(run_id, 2)


def test_step_result_landing_during_a_turn_is_not_left_to_the_reconcile(tmp_path, monkeypatch):
    log = tmp_path / "exec.log"
    engine = get_engine()
    with fake_clock() as clock:
        run_id = durable.start(fw.remote_then_local, {"log": str(log), "value": 3}, run_id="result-mid-turn")
        assert engine.run_turn(run_id) == "suspended"
        assert _land_result_during_reconcile_turn(monkeypatch, run_id, clock) == "completed"
        # Nothing is re-delivered: the stored result alone must resume the run now,
        # not after another RECONCILE_AFTER.
        row = Run.objects.get(id=run_id)
        assert row.wake_at <= clock.now(), f"run sleeps until {row.wake_at} (now {clock.now()})"
        run = run_until_settled(run_id)
        assert (run.status, run.output) == ("completed", 6)
        assert fw.executions(log, "remote") == 1
