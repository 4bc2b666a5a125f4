"""The history cache: a resumed turn reads only what changed, and every doubt reads the whole history.

On the memory store with a fake clock and the manual transport: nothing runs
behind the test's back, and the store's two history reads are counted
(``full``: ``load_checkpoints``; ``delta``: ``load_delta``). Two engines with
their own owner ids on one store stand for two processes.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import durable
from durable import conf
from durable.engine.clock import FakeClock
from durable.engine.core import AnyFleet, Engine
from durable.engine.history import History
from durable.engine.history_cache import HistoryCache
from durable.engine.leases import LeaseKeeper
from durable.engine.new_runs import run_fields
from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.vocab import RunStatus
from durable.exceptions import StepFailed
from durable.runtime import registry
from durable.store.memory import MemoryStore
from durable.transports.manual import ManualTransport
from durable.worker import due
from durable.worker.due import wake_due_runs

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
# The engine's settings as DURABLE would give them (parsed, so a new setting takes its default here too).
SETTINGS = conf.parse(
    {
        "TRANSPORT": "manual",
        "LEASE": 30.0,
        "RECONCILE_AFTER": 300.0,
        "MAX_RECOVERY_ATTEMPTS": 5,
        "WORKER_INTERVAL": 1.0,
        "WORKER_THREADS": 1,
        "SWEEP_BATCH": 100,
        "STEP_EXECUTION_LEASE": 60.0,
        "STEP_LEASE": None,
        "MAX_PAYLOAD_BYTES": 1024 * 1024,
        "FLEET_CHECK": False,
        "EAGER_STEPS": False,
        "QUEUES": {},
    }
)
events: list[str] = []


def _boom() -> None:
    raise ValueError("no")


@durable.workflow(name="hc_signals")
def hc_signals(ctx: durable.WorkflowContext) -> list[Any]:
    got = [ctx.local_step("start", lambda: {"n": [1]})]
    for _ in range(3):
        got.append(ctx.wait_signal("go"))
    return got


@durable.workflow(name="hc_mutates")
def hc_mutates(ctx: durable.WorkflowContext) -> Any:
    value = ctx.local_step("value", lambda: {"n": [1]})
    ctx.wait_signal("go")
    value["n"].append(2)  # user code mutates what the history gave it (only ever on replay)
    ctx.wait_signal("go")
    return value


@durable.workflow(name="hc_tolerant")
def hc_tolerant(ctx: durable.WorkflowContext) -> list[Any]:
    try:
        ctx.local_step("bad", lambda: events.append("bad") or _boom())
    except StepFailed:
        pass
    return [ctx.wait_signal("go"), ctx.wait_signal("go")]


@durable.workflow(name="hc_undo")
def hc_undo(ctx: durable.WorkflowContext) -> list[Any]:
    ctx.local_step("paid", lambda: 1, compensate=lambda i, o: events.append("refund"))
    return [ctx.wait_signal("go"), ctx.wait_signal("go")]


@pytest.fixture
def fake() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(fake: FakeClock) -> MemoryStore:
    return MemoryStore(clock=fake)


@pytest.fixture
def reads(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each history read of the store ran."""
    counted: Counter[str] = Counter()
    for name, method in (("full", "load_checkpoints"), ("delta", "load_delta")):
        original = getattr(store, method)

        def counting(*args: Any, _original: Any = original, _name: str = name) -> Any:
            counted[_name] += 1
            return _original(*args)

        monkeypatch.setattr(store, method, counting)
    return counted


def _engine(store: MemoryStore, fake: FakeClock, owner: str, size: int = 100) -> Engine:
    return Engine(
        store,
        ManualTransport(),
        SETTINGS,
        registry=registry,
        clock=fake,
        owner=owner,
        keeper=LeaseKeeper(),
        fleet=AnyFleet(),
        histories=HistoryCache(size, idle=300.0),
    )


@pytest.fixture
def one(store: MemoryStore, fake: FakeClock) -> Engine:
    events.clear()
    return _engine(store, fake, "process-one")


@pytest.fixture
def two(store: MemoryStore, fake: FakeClock) -> Engine:
    return _engine(store, fake, "process-two")


def _start(store: MemoryStore, fake: FakeClock, workflow: str, run_id: str, **extra: Any) -> None:
    fields = run_fields(registry.get_workflow(workflow), run_id, None, now=fake.now(), namespace="default", **extra)
    assert store.create_run(fields)


def _signal_and_turn(engine: Engine, store: MemoryStore, fake: FakeClock, run_id: str, payload: Any) -> Any:
    assert store.signal(run_id, "go", payload, fake.now())
    return engine.run_turn(run_id)


def test_a_run_resumed_by_the_process_that_suspended_it_reads_only_what_changed(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str]
) -> None:
    _start(store, fake, "hc_signals", "r1")
    assert one.run_turn("r1") == RunStatus.SUSPENDED  # the first turn reads nothing
    assert reads == Counter()
    for payload in ("a", "b"):
        assert _signal_and_turn(one, store, fake, "r1", payload) == RunStatus.SUSPENDED
    assert _signal_and_turn(one, store, fake, "r1", "c") == RunStatus.COMPLETED
    assert (reads["full"], reads["delta"]) == (0, 3)
    assert store.get_run("r1").output == [{"n": [1]}, "a", "b", "c"]
    assert len(one.histories) == 0  # a finished run leaves no entry


def test_a_turn_reads_again_only_the_positions_in_flight_or_written_since(
    one: Engine, store: MemoryStore, fake: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[list[int], int]] = []
    original = store.load_delta

    def load_delta(run_id: str, seqs: list[int], after: int) -> Any:
        asked.append((seqs, after))
        return original(run_id, seqs, after)

    monkeypatch.setattr(store, "load_delta", load_delta)
    _start(store, fake, "hc_signals", "r1")
    one.run_turn("r1")  # writes 1 (local) and 2 (a pending wait)
    _signal_and_turn(one, store, fake, "r1", "a")  # settles 2, writes 3
    _signal_and_turn(one, store, fake, "r1", "b")
    assert asked == [([1, 2], 2), ([2, 3], 3)]  # position 1 is kept from the second turn on


def test_a_turn_of_another_process_in_between_makes_the_next_turn_here_read_everything(
    one: Engine, two: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str]
) -> None:
    _start(store, fake, "hc_signals", "r1")
    one.run_turn("r1")
    assert _signal_and_turn(two, store, fake, "r1", "a") == RunStatus.SUSPENDED  # another owner: no entry there
    assert reads == Counter(full=1)
    # This process's entry is from before that turn: the run's turns moved by two, so it reads everything.
    assert _signal_and_turn(one, store, fake, "r1", "b") == RunStatus.SUSPENDED
    assert reads == Counter(full=2)
    assert _signal_and_turn(one, store, fake, "r1", "c") == RunStatus.COMPLETED
    assert reads == Counter(full=2, delta=1)
    assert store.get_run("r1").output == [{"n": [1]}, "a", "b", "c"]


def test_a_turn_that_lost_its_lease_leaves_no_entry_and_the_next_one_reads_everything(
    one: Engine, two: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(store, fake, "hc_signals", "r1")
    one.run_turn("r1")
    assert store.signal("r1", "go", "a", fake.now())
    commit = store.commit

    def taken_over(*args: Any, **kwargs: Any) -> Any:
        # The lease runs out before the commit and the other process recovers the orphan.
        fake.advance(timedelta(seconds=31))
        assert isinstance(
            store.recover_orphan("r1", two.owner, fake.now(), fake.now() + timedelta(seconds=30), 5), RunRecord
        )
        return commit(*args, **kwargs)

    monkeypatch.setattr(store, "commit", taken_over)
    assert one.run_turn("r1") == "lost"
    monkeypatch.setattr(store, "commit", commit)
    assert len(one.histories) == 0
    assert two.run_turn("r1", acquired=store.get_run("r1")) == RunStatus.SUSPENDED  # full read: no entry there
    assert _signal_and_turn(one, store, fake, "r1", "b") == RunStatus.SUSPENDED
    assert (reads["full"], reads["delta"]) == (2, 1)  # the lost turn used the entry; nothing after did
    assert store.get_run("r1").output is None
    assert [cp.output for cp in store.load_checkpoints("r1").values()][1:3] == ["a", "b"]


def test_a_cancel_with_undo_reads_the_whole_history(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str]
) -> None:
    _start(store, fake, "hc_undo", "r1")
    one.run_turn("r1")
    assert _signal_and_turn(one, store, fake, "r1", "a") == RunStatus.SUSPENDED
    assert reads == Counter(delta=1)
    assert store.cancel("r1", fake.now(), compensate=True).done
    assert one.run_turn("r1") == RunStatus.CANCELLED
    assert reads == Counter(delta=1, full=1)
    assert events == ["refund"]


def test_a_requeue_that_dropped_checkpoints_reads_the_whole_history(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str]
) -> None:
    _start(store, fake, "hc_tolerant", "r1", deadline_at=START + timedelta(seconds=60))
    one.run_turn("r1")  # 1: the local step failed (caught), 2: waits
    assert _signal_and_turn(one, store, fake, "r1", "a") == RunStatus.SUSPENDED  # entry keeps 1 as settled
    fake.advance("2m")  # (the entry is not idle yet)
    assert store.fail_overdue("r1", fake.now(), {"message": "late", "code": "timeout"})
    assert store.requeue("r1", fake.now(), None) == ["r1"]  # drops positions 1 on
    assert one.run_turn("r1") == RunStatus.SUSPENDED
    assert (reads["full"], reads["delta"]) == (1, 2)  # read by delta, found short, read in full
    assert events == ["bad", "bad"]  # the failed step ran again
    assert [cp.status for cp in store.load_checkpoints("r1").values()] == ["failed", "pending"]


def test_a_run_started_again_under_the_same_id_is_another_run() -> None:
    cache = HistoryCache(10)
    kept = _run("r1", turns=3)
    cache.keep(kept, "me", _history({1: _cp(1)}), START)
    assert cache.serves(_run("r1", turns=4), "me", START)
    assert not cache.serves(_run("r1", turns=4, created_at=START + timedelta(seconds=1)), "me", START)
    assert not cache.serves(_run("r1", turns=4), "someone else", START)
    assert not cache.serves(_run("r1", turns=5), "me", START)
    assert not cache.serves(_run("r1", turns=4, cancel_requested=True), "me", START)


def test_user_code_mutating_a_replayed_value_does_not_change_the_next_replay(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str]
) -> None:
    _start(store, fake, "hc_mutates", "r1")
    one.run_turn("r1")
    _signal_and_turn(one, store, fake, "r1", None)
    assert _signal_and_turn(one, store, fake, "r1", None) == RunStatus.COMPLETED
    assert reads == Counter(delta=2)
    assert store.get_run("r1").output == {"n": [1, 2]}


def _two_suspended_runs_reads_counted(
    one: Engine, store: MemoryStore, fake: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> list[list[str]]:
    """Runs ``a`` and ``b`` of hc_signals suspended by a sweep of ``one``; the page reads from now on."""
    for run_id in ("a", "b"):
        _start(store, fake, "hc_signals", run_id)
    assert wake_due_runs(one) == 2
    read_for: list[list[str]] = []
    original = store.load_histories
    monkeypatch.setattr(store, "load_histories", lambda ids: read_for.append(ids) or original(ids))
    return read_for


def test_the_sweep_does_not_read_the_histories_of_runs_the_cache_serves(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(due, "PAGE_CACHE_FROM", 0)  # these histories are short: use the cache anyway
    read_for = _two_suspended_runs_reads_counted(one, store, fake, monkeypatch)
    one.histories.take("b", fake.now())  # b's entry is gone: its history is read with the page
    for run_id in ("a", "b"):
        assert store.signal(run_id, "go", run_id, fake.now())
    assert wake_due_runs(one) == 2
    assert (read_for, reads["delta"]) == ([["b"]], 1)  # a: its changes only
    assert [store.load_checkpoints(r)[2].output for r in ("a", "b")] == ["a", "b"]


def test_the_sweep_reads_short_cached_histories_with_its_page_and_long_ones_from_the_cache(
    one: Engine, store: MemoryStore, fake: FakeClock, reads: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An entry keeps the settled checkpoints its turn did not write: the local step after the
    # first two turns, the local step and the first wait after the third.
    monkeypatch.setattr(due, "PAGE_CACHE_FROM", 2)
    read_for = _two_suspended_runs_reads_counted(one, store, fake, monkeypatch)
    for round_ in ("one", "two", "three"):
        for run_id in ("a", "b"):
            assert store.signal(run_id, "go", f"{run_id}-{round_}", fake.now())
        assert wake_due_runs(one) == 2
    # Rounds one and two: both entries below 2, read whole with the page; round three: the deltas.
    assert (read_for, reads["delta"]) == ([["a", "b"], ["a", "b"]], 2)
    assert [store.get_run(r).output for r in ("a", "b")] == [
        [{"n": [1]}, f"{r}-one", f"{r}-two", f"{r}-three"] for r in ("a", "b")
    ]


# -- the bounds ----------------------------------------------------------------------


def _run(run_id: str, turns: int = 1, created_at: datetime = START, **extra: Any) -> RunRecord:
    values: dict[str, Any] = dict.fromkeys(RunRecord.__dataclass_fields__)
    values.update(id=run_id, turns=turns, created_at=created_at, cancel_requested=False)
    values.update(extra)
    return RunRecord(**values)


def _cp(seq: int, status: str = "completed") -> CheckpointRecord:
    return CheckpointRecord(seq=seq, name=f"op{seq}", kind="local", status=status)


def _history(records: dict[int, CheckpointRecord]) -> History:
    return History("r", records, FakeClock(START), cancelling=False)


def test_the_cache_keeps_at_most_its_size_dropping_the_least_recently_written() -> None:
    cache = HistoryCache(2)
    for run_id in ("a", "b", "c"):
        cache.keep(_run(run_id), "me", _history({1: _cp(1)}), START)
    assert len(cache) == 2
    assert [cache.serves(_run(r, turns=2), "me", START) for r in ("a", "b", "c")] == [False, True, True]


def test_the_cache_holds_at_most_its_checkpoints_and_skips_a_history_larger_than_that() -> None:
    cache = HistoryCache(10, checkpoints=3)
    cache.keep(_run("a"), "me", _history({1: _cp(1), 2: _cp(2)}), START)
    cache.keep(_run("b"), "me", _history({1: _cp(1), 2: _cp(2)}), START)
    assert (len(cache), cache.held) == (1, 2)  # a went to make room for b
    cache.keep(_run("c"), "me", _history({seq: _cp(seq) for seq in range(1, 5)}), START)
    assert (len(cache), cache.held) == (1, 2)  # c alone is over the bound: not kept
    assert cache.serves(_run("b", turns=2), "me", START)


def test_an_entry_idle_too_long_is_dropped() -> None:
    cache = HistoryCache(10, idle=60.0)
    cache.keep(_run("a"), "me", _history({1: _cp(1)}), START)
    later = START + timedelta(seconds=61)
    assert not cache.serves(_run("a", turns=2), "me", later)
    assert cache.take("a", later) is None
    cache.keep(_run("b"), "me", _history({1: _cp(1)}), START)
    cache.keep(_run("c"), "me", _history({1: _cp(1)}), later)  # writing c drops the idle b
    assert (len(cache), cache.held) == (1, 1)


def test_only_settled_checkpoints_the_turn_did_not_write_are_kept() -> None:
    history = _history({1: _cp(1), 2: _cp(2, "pending"), 3: _cp(3)})
    history.remember(_cp(3))
    history.remember(_cp(4, "pending"))
    cache = HistoryCache(10)
    cache.keep(_run("a"), "me", history, START)
    entry = cache.take("a", START)
    assert entry is not None
    assert (list(entry.stable), entry.unsure, entry.after) == ([1], (2, 3, 4), 4)


def test_a_size_of_zero_keeps_nothing(one: Engine, store: MemoryStore, fake: FakeClock) -> None:
    cache = HistoryCache(0)
    cache.keep(_run("a"), "me", _history({1: _cp(1)}), START)
    assert len(cache) == 0
