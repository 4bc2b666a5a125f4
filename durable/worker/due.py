"""Sweeps of work whose time has come: due runs (pending, or sleeping past their wake) and due steps.

Each sweep is a plain function, safe to run at the same time on any number of
machines (every state change it makes is compare-and-set), bounded by
``DURABLE["SWEEP_BATCH"]`` per call, and returns how much it did.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from durable.engine.core import Engine
from durable.engine.namespaces import scope
from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.requirements import serves
from durable.engine.vocab import StepResult

logger = logging.getLogger("durable.sweeps")

StopCheck = Callable[[], bool]
# Runs a page of jobs (each the turn of one claimed run) and returns their results in order.
Runner = Callable[[Sequence[Callable[[], Any]]], list[Any]]
Claimed = list[tuple[RunRecord, dict[int, CheckpointRecord] | None]]
# A claimed run starts from its history cache entry only when the entry keeps at least this many
# settled checkpoints. A cached turn reads its changes in a statement of its own; a shorter
# history costs less read whole with the rest of the page, in the page's one statement (2,000
# sleepers woken at once by two workers: the last woke 600-730 ms late with a read per cached
# wake, 470-530 ms with this).
PAGE_CACHE_FROM = 16


def never() -> bool:
    """The default ``should_stop``: a sweep runs its whole batch."""
    return False


def run_due_steps(engine: Engine, *, should_stop: StopCheck = never) -> int:
    """Execute pending dispatched steps here (polling deployments and the test kit)."""
    done = 0
    steps = engine.store.due_steps(engine.clock.now(), engine.settings.sweep_batch, **scope(engine.namespaces))
    for run_id, seq, queue in steps:
        if should_stop():
            break
        if not serves(engine.capabilities, queue):
            continue  # it needs a capability this worker lacks
        if engine.execute_step(run_id, seq) != StepResult.SKIPPED:
            done += 1
    return done


def admit_waiting(engine: Engine, *, should_stop: StopCheck = never) -> int:
    """Admit waiting singleton runs into slots freed without a hand-over; how many were admitted.

    A slot is normally handed over in the write that frees it (a turn's
    final commit, a cancel, a dead or timed-out run); this sweep catches
    what a crash between two writes left, and a limit raised by a deploy.
    Each key is decided under its slot lock, so sweepers may race.
    """
    done = 0
    for workflow, key in engine.store.waiting_keys(engine.settings.sweep_batch):
        if should_stop():
            break
        for run_id in engine.store.hand_over(workflow, key, engine.clock.now()):
            done += 1
            engine.transport.dispatch_turn(run_id)
    return done


def wake_due_runs(
    engine: Engine, *, execute: bool = True, should_stop: StopCheck = never, runner: Runner | None = None
) -> int:
    """Run (or dispatch) pending runs and suspended runs whose wake time has come.

    Executing, the sweep claims a page of due runs at once (their leases taken
    in one statement, see ``claim_due_runs``), reads their histories in one
    query, and runs each claimed turn under that lease, the final commits of
    a slice of the page together (``Engine.run_turns``). With a ``runner``
    (the worker's threads) the page is split in one slice per thread when
    recent turns were slow enough for threads to help (``engine.stats.turn_seconds``
    at least the interpreter's switch interval: turns waiting on I/O in user
    code); quick turns run as one slice, in the calling thread. With a
    ``runner`` it goes on with the next page while pages come back full, for
    up to ``WORKER_INTERVAL``. A claimed run whose turn
    does not start because a stop was requested is handed back, still due.
    """
    if not execute:
        done = 0
        for run_id in engine.store.due_runs(
            engine.clock.now(), engine.settings.sweep_batch, **scope(engine.namespaces)
        ):
            if should_stop():
                break
            engine.transport.dispatch_turn(run_id)
            done += 1
        return done
    done = 0
    batch = engine.settings.sweep_batch
    started = time.monotonic()
    while not should_stop():
        now = engine.clock.now()
        lease_until = now + timedelta(seconds=engine.settings.lease)
        # A scoped worker (durable_worker --namespace) claims only its namespaces' runs.
        runs = engine.store.claim_due_runs(engine.owner, now, lease_until, batch, **scope(engine.namespaces))
        if runs:
            done += _run_page(engine, runs, should_stop, runner)
        # A full page means more runs may be due. The worker loop (``runner``) claims the next
        # page at once, for up to WORKER_INTERVAL; then the other sweeps get their turn.
        if runner is None or len(runs) < batch or time.monotonic() - started >= engine.settings.worker_interval:
            break
    return done


def _run_page(engine: Engine, runs: list[RunRecord], should_stop: StopCheck, runner: Runner | None) -> int:
    """Run the turns of a claimed page, in slices whose final commits go together; how many ran."""
    # The page's histories in one query: not for a run on its first turn (it has none), nor for
    # one whose turn starts from this process's history cache (it reads only what changed), if
    # that entry is long enough (PAGE_CACHE_FROM).
    now = engine.clock.now()
    cached = {run.id for run in runs if engine.histories.serves(run, engine.owner, now, PAGE_CACHE_FROM)}
    again = [run.id for run in runs if run.turns > 1 and run.id not in cached]
    histories = engine.store.load_histories(again) if again else {}
    claimed = [(run, None if run.id in cached else histories.get(run.id, {})) for run in runs]
    # One job per thread, each a slice of the page whose final commits go together.
    threads = engine.settings.worker_threads if runner else 1
    if engine.stats.turn_seconds < sys.getswitchinterval():
        # Turns quicker than the interpreter's switch interval gain nothing from threads:
        # they contend for the GIL, and every database wait then ends in a wait for it.
        threads = 1
    size = -(-len(claimed) // threads)
    slices = [claimed[i : i + size] for i in range(0, len(claimed), size)]
    return sum((runner or _here)([partial(_claimed_turns, engine, part, should_stop) for part in slices]))


def _here(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    return [job() for job in jobs]


def _claimed_turns(engine: Engine, claimed: Claimed, should_stop: StopCheck) -> int:
    """Run the turns of runs this process claimed, their final commits together; how many ran."""
    try:
        return sum(status is not None for status in engine.run_turns(claimed, should_stop))
    except Exception:
        # The leases lapse and the orphan sweep takes these runs over.
        logger.exception("turns of %d claimed runs failed", len(claimed))
        return 0
