"""Workflows and steps shared by the test suite (registered at import)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import durable

# Executions per step name, to assert a completed step never runs again.
calls: Counter[str] = Counter()


@durable.step
def t_add(a: int, b: int) -> int:
    calls["t_add"] += 1
    return a + b


@durable.workflow(name="t_three_steps")
def t_three_steps(ctx: durable.WorkflowContext, x: int) -> int:
    a = ctx.step(t_add, x, 1)
    b = ctx.local_step("double", lambda: a * 2)
    c = ctx.step(t_add, b, 10)
    return c


@durable.workflow(name="t_noinput")
def t_noinput(ctx: durable.WorkflowContext) -> str:
    return "ok"


def reset() -> None:
    calls.clear()


__all__: list[Any] = []
