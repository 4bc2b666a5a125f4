"""Workflows of the NOTIFY pickup tests, and the app entry that registers them in their workers."""

from __future__ import annotations

import os

from django.apps import AppConfig

import durable


@durable.step(name="notify.work")
def notify_work(n: int) -> int:
    return n + 1


@durable.workflow(name="notify.flow")
def notify_flow(ctx: durable.WorkflowContext, n: int) -> dict[str, int]:
    """One local step; the output names the process that ran the turn."""
    value = ctx.local_step("add", lambda: n + 1)
    return {"value": value, "pid": os.getpid()}


@durable.workflow(name="notify.waits")
def notify_waits(ctx: durable.WorkflowContext, n: int) -> dict[str, int]:
    """Waits for signal ``go``, then ends (in the process that took the signal's turn)."""
    got = ctx.wait_signal("go")
    return {"value": n + int(got), "pid": os.getpid()}


@durable.workflow(name="notify.dispatched")
def notify_dispatched(ctx: durable.WorkflowContext, n: int) -> int:
    """One dispatched step: its result wakes the run."""
    return int(ctx.step(notify_work, n))


@durable.workflow(name="notify.single", singleton=durable.Singleton(key="k"))
def notify_single(ctx: durable.WorkflowContext, data: dict[str, int]) -> int:
    """One run per key ``k`` at a time: a second start of a key waits, queued."""
    return int(data["k"])


class NotifyWorkflowsConfig(AppConfig):
    name = "tests"
    label = "durable_notify_tests"
    verbose_name = "django-durable NOTIFY tests"
