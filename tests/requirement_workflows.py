"""Workflows of the step-requirement fleet test, and the app entry that registers them in its workers."""

from __future__ import annotations

import os

from django.apps import AppConfig

import durable


@durable.step(name="reqfleet.render", requires=["gpu"])
def reqfleet_render(n: int) -> int:
    return os.getpid()


@durable.step(name="reqfleet.plain")
def reqfleet_plain(n: int) -> int:
    return os.getpid()


@durable.workflow(name="reqfleet.flow")
def reqfleet_flow(ctx: durable.WorkflowContext, n: int) -> dict[str, int]:
    return {"plain": ctx.step(reqfleet_plain, n), "render": ctx.step(reqfleet_render, n)}


class RequirementWorkflowsConfig(AppConfig):
    name = "tests"
    label = "durable_requirement_tests"
    verbose_name = "django-durable step requirement tests"
