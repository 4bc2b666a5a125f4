"""What a worker does: the worker loop and the sweeps it runs each tick.

A sweep re-derives due work from the database (the transport is only a
doorbell): :mod:`durable.worker.due` runs work whose time has come,
:mod:`durable.worker.repair` takes over what a crash, a lost message or a
deadline left behind, :mod:`durable.worker.announce` delivers owed lifecycle
events, :func:`tick` runs one pass of all of them, and
:class:`~durable.worker.loop.WorkerLoop` ticks until stopped (``manage.py
durable_worker``, the embedded worker of the web process). The package is
named for its user rather than "sweeps" so that it does not collide with the
store's sweep queries (:mod:`durable.store.portable.due_work`).
"""

from __future__ import annotations

from durable.worker.announce import heal_lifecycle, publish_lifecycle
from durable.worker.due import Runner, StopCheck, run_due_steps, wake_due_runs
from durable.worker.loop import WorkerLoop, start_embedded
from durable.worker.repair import (
    expire_timeouts,
    recheck_blocked,
    recover_orphans,
    recover_steps,
    redispatch_lost_steps,
)
from durable.worker.tick import tick

__all__ = [
    "Runner",
    "StopCheck",
    "WorkerLoop",
    "expire_timeouts",
    "heal_lifecycle",
    "publish_lifecycle",
    "recheck_blocked",
    "recover_orphans",
    "recover_steps",
    "redispatch_lost_steps",
    "run_due_steps",
    "start_embedded",
    "tick",
    "wake_due_runs",
]
