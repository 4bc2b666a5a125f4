"""One pass of every sweep, in the order that lets each see the previous one's work."""

from __future__ import annotations

import logging

from durable.engine import logs
from durable.engine.core import Engine
from durable.schedules.sweep import fire_due_schedules
from durable.worker.announce import publish_lifecycle
from durable.worker.due import Runner, StopCheck, never, run_due_steps, wake_due_runs
from durable.worker.repair import (
    expire_timeouts,
    recheck_blocked,
    recover_orphans,
    recover_steps,
    redispatch_lost_steps,
)

logger = logging.getLogger("durable.sweeps")


def tick(
    engine: Engine, *, execute: bool = True, should_stop: StopCheck = never, runner: Runner | None = None
) -> dict[str, int]:
    """One pass of every sweep. Returns counts per sweep.

    ``runner`` runs the turns of the due runs the sweep claimed (the worker
    loop's threads); without it they run one after another in this thread.
    Logs its counts on ``durable.sweeps``: at INFO only when it did something.
    """
    counts = {"timeouts": expire_timeouts(engine, should_stop=should_stop)}
    counts["schedules"] = fire_due_schedules(engine)
    counts.update(recover_orphans(engine, execute=execute, should_stop=should_stop))
    counts["unblocked"] = recheck_blocked(engine)
    counts["steps_recovered"] = recover_steps(engine, execute=execute, should_stop=should_stop)
    if execute:
        counts["steps"] = run_due_steps(engine, should_stop=should_stop)
    else:
        counts.update(redispatch_lost_steps(engine, should_stop=should_stop))
    counts["turns"] = wake_due_runs(engine, execute=execute, should_stop=should_stop, runner=runner)
    counts.update(publish_lifecycle(engine, should_stop=should_stop))
    logs.sweep_summary(logger, "sweep", counts)
    return counts
