"""Workflows used by the dashboard tests (registered at import)."""

from __future__ import annotations

from typing import Any

import durable


@durable.step(name="dash.add")
def dash_add(a: int, b: int) -> int:
    return a + b


@durable.workflow(name="dash_wait", tags=["dash"])
def dash_wait(ctx: durable.WorkflowContext, data: Any) -> Any:
    ctx.local_step("prepare", lambda: "ready")
    return ctx.wait_signal("go")


@durable.workflow(name="dash_fail")
def dash_fail(ctx: durable.WorkflowContext, data: Any) -> Any:
    def boom() -> None:
        raise durable.FatalError("card declined", code="declined")

    if isinstance(data, dict) and data.get("ok"):
        return "fixed"
    ctx.local_step("charge", boom)
    return "unreachable"


@durable.workflow(name="dash_step")
def dash_step(ctx: durable.WorkflowContext, x: int) -> int:
    return ctx.step(dash_add, x, 1)


@durable.workflow(name="dash_sleep")
def dash_sleep(ctx: durable.WorkflowContext) -> str:
    ctx.sleep("1h")
    return "woke"


def validate_order(data: Any) -> Any:
    if not isinstance(data, dict) or "id" not in data:
        raise ValueError("an order needs an id")
    return data


@durable.workflow(name="dash_order", version=1)
def dash_order_v1(ctx: durable.WorkflowContext, data: Any) -> Any:
    return data


@durable.workflow(name="dash_order", version=2, validate=validate_order)
def dash_order_v2(ctx: durable.WorkflowContext, data: Any) -> Any:
    return data


def approve_validator(value: Any) -> Any:
    if not isinstance(value, dict) or "by" not in value:
        raise ValueError("an approval needs 'by'")
    return value


@durable.workflow(name="dash_query", updates={"approve": approve_validator})
def dash_query(ctx: durable.WorkflowContext) -> Any:
    ctx.set_event("stage", "waiting for approval")
    approval = ctx.wait_update("approve")
    ctx.set_event("stage", "approved")
    return approval


@durable.workflow(name="dash_source")
def dash_source(ctx: durable.WorkflowContext) -> str:
    return "done"


@durable.workflow(name="dash_listener", on_event=["run.completed:dash_source"])
def dash_listener(ctx: durable.WorkflowContext, event: Any) -> Any:
    return "heard"


@durable.workflow(name="dash_chain")
def dash_chain(ctx: durable.WorkflowContext, n: int) -> int:
    if n < 2:
        ctx.continue_as_new(n + 1)
    return n


@durable.workflow(name="dash_parent")
def dash_parent(ctx: durable.WorkflowContext) -> Any:
    return ctx.child(dash_wait, {"n": 3}, run_id="dash-child")


@durable.workflow(name="dash_import", singleton=durable.Singleton(key="account", max_queue_depth=0))
def dash_import(ctx: durable.WorkflowContext, data: Any) -> Any:
    return ctx.wait_signal("go")


@durable.workflow(name="dash_serial", singleton=durable.Singleton(key="account"))
def dash_serial(ctx: durable.WorkflowContext, data: Any) -> Any:
    return ctx.wait_signal("go")
