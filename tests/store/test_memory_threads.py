"""The memory store under concurrent callers: one lock, so compare-and-set races have one winner."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from durable.engine.ports import Outcome, TurnWrites
from durable.engine.vocab import RunStatus
from durable.store.memory import MemoryStore
from tests.store.conftest import at, creates, fields, step


def _together(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` in ``count`` threads released at the same moment; their results in order."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_page_claims_take_disjoint_runs() -> None:
    store = MemoryStore()
    for i in range(200):
        store.create_run(fields(f"r{i:03}", created_at=at(i)))

    def claim_all(i: int) -> list[str]:
        mine: list[str] = []
        while page := store.claim_due_runs(f"owner-{i}", at(500), at(530), 7):
            mine += [run.id for run in page]
        return mine

    claimed = _together(4, claim_all)
    flat = [run_id for page in claimed for run_id in page]
    assert sorted(flat) == [f"r{i:03}" for i in range(200)]
    for i, mine in enumerate(claimed):
        assert {store.get_run(run_id).locked_by for run_id in mine} <= {f"owner-{i}"}


def test_concurrent_claims_of_one_step_have_one_winner() -> None:
    store = MemoryStore()
    store.create_run(fields("r1"))
    store.acquire("r1", "turn", at(0), at(30))
    store.commit("r1", "turn", at(0), at(30), creates(step(1)))
    claims = _together(8, lambda i: store.claim_step("r1", 1, f"worker-{i}", at(1), at(61)))
    winners = [claim for claim in claims if claim is not None]
    assert len(winners) == 1
    assert store.load_checkpoints("r1")[1].attempts == 1


def test_concurrent_cancel_and_commit_never_both_win() -> None:
    store = MemoryStore()
    for i in range(50):
        store.create_run(fields(f"r{i}"))
        store.acquire(f"r{i}", "turn", at(0), at(30))

    def race(i: int) -> Any:
        run_id = f"r{i // 2}"
        if i % 2:
            return store.cancel(run_id, at(1)).done
        outcome = Outcome(RunStatus.COMPLETED, output=i, had_waiters=False)
        return store.commit(run_id, "turn", at(1), at(31), TurnWrites(), outcome).written

    results = _together(100, race)
    for i in range(50):
        committed, cancelled = results[2 * i], results[2 * i + 1]
        assert committed != cancelled
        assert store.get_run(f"r{i}").status == (RunStatus.COMPLETED if committed else RunStatus.CANCELLED)
