"""One pass of every sweep, in the order that lets each see the previous one's work."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from durable.engine import logs
from durable.engine.core import Engine
from durable.schedules.sweep import fire_due_schedules
from durable.worker.announce import publish_lifecycle
from durable.worker.due import Runner, StopCheck, admit_waiting, never, run_due_steps, wake_due_runs
from durable.worker.repair import (
    admit_queues,
    expire_timeouts,
    recheck_blocked,
    recover_orphans,
    recover_steps,
    redispatch_lost_steps,
)
from durable.worker.retention import sweep_retention

logger = logging.getLogger("durable.sweeps")


def tick(
    engine: Engine, *, execute: bool = True, should_stop: StopCheck = never, runner: Runner | None = None
) -> dict[str, int]:
    """One pass of every sweep. Returns counts per sweep.

    ``runner`` runs the turns of the due runs the sweep claimed (the worker
    loop's threads); without it they run one after another in this thread.
    Logs its counts on ``durable.sweeps``: at INFO only when it did something.
    Each sweep's duration and count go to the engine's observer.
    """
    counts: dict[str, int] = {}
    timed = partial(_timed, engine, counts)
    timed("timeouts", lambda: expire_timeouts(engine, should_stop=should_stop))
    timed("schedules", lambda: fire_due_schedules(engine))
    timed("orphans", lambda: recover_orphans(engine, execute=execute, should_stop=should_stop))
    timed("unblocked", lambda: recheck_blocked(engine))
    timed("steps_recovered", lambda: recover_steps(engine, execute=execute, should_stop=should_stop))
    if engine.settings.queues:
        timed("admitted", lambda: admit_queues(engine))
    if execute:
        timed("steps", lambda: run_due_steps(engine, should_stop=should_stop))
    else:
        timed("lost_steps", lambda: redispatch_lost_steps(engine, should_stop=should_stop))
    timed("admitted", lambda: admit_waiting(engine, should_stop=should_stop))
    timed("turns", lambda: wake_due_runs(engine, execute=execute, should_stop=should_stop, runner=runner))
    timed("lifecycle", lambda: publish_lifecycle(engine, should_stop=should_stop))
    timed("pruned", lambda: sweep_retention(engine, should_stop=should_stop))
    logs.sweep_summary(logger, "sweep", counts)
    return counts


def _timed(engine: Engine, counts: dict[str, int], kind: str, sweep: Callable[[], int | dict[str, int]]) -> None:
    """Run one sweep, add what it did to ``counts`` (under its own keys) and tell the observer."""
    started = time.perf_counter()
    done = sweep()
    found = done if isinstance(done, dict) else {kind: done}
    counts.update(found)
    engine.observer.sweep(kind, time.perf_counter() - started, sum(found.values()))
