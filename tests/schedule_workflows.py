"""Workflows the schedule tests start (registered at import; no code schedules, so no other test sees them)."""

from __future__ import annotations

from typing import Any

import durable


@durable.workflow(name="sched.window")
def window_job(ctx: durable.WorkflowContext, value: Any = None) -> dict[str, Any]:
    """Returns what a scheduled run knows about its window."""
    window = ctx.schedule_window
    return {"key": ctx.schedule_key, "window": window.isoformat() if window else None, "input": value}


@durable.workflow(name="sched.held")
def held_job(ctx: durable.WorkflowContext) -> str:
    """Stays active until signalled ``go``."""
    ctx.wait_signal("go")
    return "done"


@durable.workflow(name="sched.where")
def where_job(ctx: durable.WorkflowContext) -> dict[str, Any]:
    """Records which process ran the run's turn (the fleet test counts them)."""
    import os

    return {"pid": os.getpid(), "window": ctx.schedule_window.isoformat() if ctx.schedule_window else None}
