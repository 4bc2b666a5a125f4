"""The memory store against a database store: the same random operations, the same answers.

Each case plays one seeded sequence of store calls (starts, leases, commits
with steps and waiters, signals, step claims and results, cancels, releases,
requeues, orphan recovery, page claims) on a :class:`MemoryStore` and on a
database store side by side, and after every call compares what they
returned and every run and history they hold.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from durable.engine.ports import CancelResult, ClaimCheck, Outcome, RunRecord, TurnWrites, Waiter
from durable.engine.vocab import RUN_TOKEN, CheckpointKind, CheckpointStatus, RunStatus
from durable.store.memory import MemoryStore
from tests.store.conftest import _database_store, at, creates, fields, record, step

RUNS = [f"r{i}" for i in range(5)]
OWNERS = ["a", "b"]
ERROR = {"message": "no", "code": "x", "retryable": True, "type": "E", "traceback": None}


def _snapshot(store: Any) -> tuple[list[Any], dict[str, Any]]:
    """Every run (newest first) and every history the store holds."""
    query: dict[str, Any] = {"statuses": [], "workflow": None, "namespace": None, "tag": None, "attributes": []}
    runs = store.list_runs(**query, created_after=None, created_before=None, after=None, limit=len(RUNS) + 1)
    return runs, store.load_histories(RUNS)


class Player:
    """Plays one random call on both stores and checks they agree."""

    def __init__(self, seed: int, memory: MemoryStore, database: Any) -> None:
        self.rng = random.Random(seed)
        self.stores = (memory, database)
        self.now = at(0)
        self.log: list[str] = []

    def both(self, name: str, call: Callable[[Any], Any], norm: Callable[[Any, Any], Any] = lambda s, r: r) -> None:
        got = []
        for store in self.stores:
            try:
                got.append(norm(store, call(store)))
            except Exception as exc:  # the exception's type is the answer
                got.append(type(exc).__name__)
        self.log.append(f"{name} -> {got[0]!r}")
        assert got[0] == got[1], "\n".join(self.log)
        memory, database = (_snapshot(store) for store in self.stores)
        assert memory == database, "\n".join(self.log)

    def next_seq(self, run_id: str) -> int:
        return max(self.stores[0].load_checkpoints(run_id), default=0) + 1

    def maybe_acquire(self, run_id: str, owner: str) -> None:
        """Usually take the lease first, so that the commit that follows has a chance."""
        if self.rng.random() < 0.7:
            _acquire(self, run_id, owner)

    def pick_seq(self, run_id: str) -> int:
        """Mostly a position the run has, sometimes one it has not."""
        seqs = list(self.stores[0].load_checkpoints(run_id))
        return self.rng.choice(seqs) if seqs and self.rng.random() < 0.85 else self.rng.randint(1, 4)

    def play(self) -> None:
        rng = self.rng
        existing = [r for r in RUNS if self.stores[0].get_run(r) is not None]
        run_id = rng.choice(existing) if existing and rng.random() < 0.8 else rng.choice(RUNS)
        run = self.stores[0].get_run(run_id)
        holder = run.locked_by if run is not None else None
        owner = holder if holder and rng.random() < 0.8 else rng.choice(OWNERS)
        op = rng.choice(OPS)
        self.now += timedelta(seconds=rng.choice([0, 1, 5, 40, 120]))
        op(self, run_id, owner)


def _create(p: Player, run_id: str, owner: str) -> None:
    parent = p.rng.choice([None, *RUNS])
    deadline = p.now + timedelta(seconds=p.rng.choice([30, 600]))
    row = fields(run_id, created_at=p.now, parent_id=parent, deadline_at=deadline)
    p.both(f"create {run_id}", lambda s: s.create_run(row))


def _acquire(p: Player, run_id: str, owner: str) -> None:
    p.both(f"acquire {run_id} {owner}", lambda s: s.acquire(run_id, owner, p.now, p.now + timedelta(seconds=30)))


def _suspend(p: Player, run_id: str, owner: str) -> None:
    p.maybe_acquire(run_id, owner)
    seq = p.next_seq(run_id)
    kind = p.rng.choice(["step", "step", "signal", "child"])
    waiters: list[Waiter] = []
    rec = step(seq, enqueued_at=p.now)
    if kind == "signal":
        rec = record(seq, CheckpointKind.SIGNAL, CheckpointStatus.PENDING, name="go")
        waiters = [Waiter("go", seq)]
    elif kind == "child":
        other = p.rng.choice(RUNS)
        rec = record(seq, CheckpointKind.WAIT_RUN, CheckpointStatus.PENDING, input={"run_id": other})
        waiters = [Waiter(RUN_TOKEN + other, seq)]
    wake = p.now + timedelta(seconds=p.rng.choice([10, 100]))
    outcome = Outcome(RunStatus.SUSPENDED, wake_at=wake, waiters=waiters, step_seqs=[seq] if kind == "step" else [])
    lease = p.now + timedelta(seconds=30)
    commit = (run_id, owner, p.now, lease, creates(rec), outcome)
    p.both(f"suspend {run_id} {owner} {kind}#{seq}", lambda s: s.commit(*commit), _commit(run_id))


def _finish(p: Player, run_id: str, owner: str) -> None:
    p.maybe_acquire(run_id, owner)
    status = p.rng.choice([RunStatus.COMPLETED, RunStatus.FAILED])
    outcome = Outcome(status, output=1, error=ERROR if status == RunStatus.FAILED else None)
    outcome.notify = [RUN_TOKEN + run_id]
    commit = (run_id, owner, p.now, p.now + timedelta(seconds=30), TurnWrites(), outcome)
    p.both(f"finish {run_id} {owner} {status}", lambda s: s.commit(*commit), _commit(run_id))


def _commit(run_id: str) -> Callable[[Any, Any], Any]:
    def norm(store: Any, result: Any) -> Any:
        woken = sorted(r for r in result.woken if store.get_run(r).status == RunStatus.SUSPENDED)
        return result.written, woken, result.wake_at

    return norm


def _signal(p: Player, run_id: str, owner: str) -> None:
    p.both(f"signal {run_id}", lambda s: s.signal(run_id, "go", len(p.log), p.now))


def _step_result(p: Player, run_id: str, owner: str) -> None:
    seq = p.pick_seq(run_id)
    choice = p.rng.choice(["ok", "error", "retry"])
    kwargs: dict[str, Any] = {"output": "v"} if choice == "ok" else {"error": ERROR}
    if choice == "retry":
        kwargs["retry_at"] = p.now + timedelta(seconds=20)
    p.both(f"finish_step {run_id}#{seq} {choice}", lambda s: s.finish_step(run_id, seq, p.now, **kwargs))


def _claim(p: Player, run_id: str, owner: str) -> None:
    seq = p.pick_seq(run_id)
    p.both(
        f"claim_step {run_id}#{seq} {owner}",
        lambda s: s.claim_step(run_id, seq, owner, p.now, p.now + timedelta(seconds=60)),
    )


def _cancel(p: Player, run_id: str, owner: str) -> None:
    compensate = p.rng.random() < 0.3

    def norm(store: Any, got: CancelResult) -> Any:
        woken = sorted(r for r in got.woken if store.get_run(r).status == RunStatus.SUSPENDED or compensate)
        return got.done, woken, sorted(got.cancelled)

    p.both(f"cancel {run_id} compensate={compensate}", lambda s: s.cancel(run_id, p.now, compensate), norm)


def _release(p: Player, run_id: str, owner: str) -> None:
    count = p.rng.random() < 0.5
    p.both(f"release {run_id} {owner} count={count}", lambda s: s.release(run_id, owner, p.now, p.now, count, 1))


def _poke(p: Player, run_id: str, owner: str) -> None:
    p.both(f"poke {run_id}", lambda s: s.poke(run_id, p.now))


def _requeue(p: Player, run_id: str, owner: str) -> None:
    p.both(f"requeue {run_id}", lambda s: s.requeue(run_id, p.now, None))


def _recover(p: Player, run_id: str, owner: str) -> None:
    def norm(store: Any, got: Any) -> Any:
        # (The database store's record keeps updated_at as read before its own write.)
        return replace(got, updated_at=None) if isinstance(got, RunRecord) else got

    lease = p.now + timedelta(seconds=30)
    p.both(f"recover {run_id} {owner}", lambda s: s.recover_orphan(run_id, owner, p.now, lease, 2), norm)


def _claim_page(p: Player, run_id: str, owner: str) -> None:
    lease = p.now + timedelta(seconds=30)
    p.both(f"claim_due_runs {owner}", lambda s: sorted(r.id for r in s.claim_due_runs(owner, p.now, lease, 10)))


def _consume(p: Player, run_id: str, owner: str) -> None:
    p.maybe_acquire(run_id, owner)

    def take(store: Any) -> Any:
        got = store.next_signal(run_id, "go", [])
        # (A flush that writes no run column renews the lease on the portable store only.)
        writes = TurnWrites(consumed_signals=[got[0]] if got else [], run_fields={"patches": [len(p.log)]})
        return (got[1] if got else None), store.commit(
            run_id, owner, p.now, p.now + timedelta(seconds=30), writes
        ).written

    p.both(f"consume {run_id} {owner}", take)


def _block(p: Player, run_id: str, owner: str) -> None:
    p.both(f"block {run_id} {owner}", lambda s: s.block(run_id, owner, p.now, {"code": "x"}))


def _unblock(p: Player, run_id: str, owner: str) -> None:
    p.both(f"unblock {run_id}", lambda s: s.unblock([run_id], p.now))


def _pending_steps(p: Player, run_id: str, owner: str) -> None:
    p.both(f"pending_steps {run_id}", lambda s: s.pending_steps(run_id, p.now, p.now + timedelta(seconds=15)))


def _heartbeat(p: Player, run_id: str, owner: str) -> None:
    seq = p.pick_seq(run_id)
    lease = p.now + timedelta(seconds=60)
    p.both(f"heartbeat {run_id}#{seq}", lambda s: s.heartbeat_step(run_id, seq, p.now, {"at": len(p.log)}, lease))


def _renew_step(p: Player, run_id: str, owner: str) -> None:
    seq = p.pick_seq(run_id)
    p.both(
        f"renew_step {run_id}#{seq} {owner}", lambda s: s.renew_step(run_id, seq, owner, p.now + timedelta(seconds=60))
    )


def _timeout(p: Player, run_id: str, owner: str) -> None:
    p.both(f"request_timeout {run_id}", lambda s: s.request_timeout(run_id, p.now, ERROR))


def _sweep_reads(p: Player, run_id: str, owner: str) -> None:
    def reads(store: Any) -> Any:
        steps = sorted((r["run_id"], r["seq"], r["wake_at"]) for r in store.expired_steps(p.now, 50))
        lost = sorted((r["run_id"], r["seq"], r["dispatches"]) for r in store.lost_steps(p.now, 50))
        due = sorted(store.due_steps(p.now, 50))
        return steps, lost, due, sorted(store.orphans(p.now, 50)), sorted(store.due_runs(p.now, 50))

    p.both("sweep reads", reads)


def _lapse_step(p: Player, run_id: str, owner: str) -> None:
    seq = p.pick_seq(run_id)

    def lapse(store: Any) -> Any:
        cp = store.load_checkpoints(run_id).get(seq)
        expected = cp.wake_at if cp is not None else None
        claim = ClaimCheck(cp.locked_by if cp is not None else owner, cp.attempts if cp is not None else 1)
        new_wake = p.now + timedelta(seconds=25)
        retry = new_wake if seq % 2 else None  # a retry, or the step failed for good
        lapsed = store.lapse_step(run_id, seq, p.now, claim, ERROR, retry)
        return lapsed, store.redispatch_step(run_id, seq, expected, new_wake)

    p.both(f"lapse/redispatch {run_id}#{seq}", lapse)


OPS = [
    _create,
    _acquire,
    _acquire,
    _suspend,
    _suspend,
    _finish,
    _signal,
    _step_result,
    _step_result,
    _claim,
    _claim,
    _cancel,
    _release,
    _poke,
    _requeue,
    _recover,
    _claim_page,
    _consume,
    _block,
    _unblock,
    _pending_steps,
    _heartbeat,
    _renew_step,
    _timeout,
    _sweep_reads,
    _lapse_step,
]


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("portable", marks=pytest.mark.django_db),
        pytest.param("postgres", marks=[pytest.mark.django_db, pytest.mark.postgres]),
    ],
)
@pytest.mark.parametrize("seed", range(10))
def test_the_memory_store_answers_as_the_database_store(kind: str, seed: int) -> None:
    player = Player(seed, MemoryStore(), _database_store(kind))
    for run_id in RUNS:
        _create(player, run_id, "a")
    for _ in range(80):
        player.play()
