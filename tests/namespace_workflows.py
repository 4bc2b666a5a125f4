"""Workflows of the namespace fleet test, and the app entry that registers them in its workers."""

from __future__ import annotations

import os

from django.apps import AppConfig

import durable


@durable.step(name="nsfleet.work")
def nsfleet_work(n: int) -> int:
    return os.getpid()


@durable.workflow(name="nsfleet.flow")
def nsfleet_flow(ctx: durable.WorkflowContext, n: int) -> dict[str, int]:
    first = ctx.step(nsfleet_work, n)
    second = ctx.step(nsfleet_work, n + 1)
    # The final turn's process: the output is written by the turn that returns.
    return {"first": first, "second": second, "turn": os.getpid()}


class NamespaceWorkflowsConfig(AppConfig):
    name = "tests"
    label = "durable_namespace_tests"
    verbose_name = "django-durable namespace tests"
