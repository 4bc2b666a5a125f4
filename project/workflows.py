"""Example workflows of the demo project. Auto-discovered by the durable app."""

from __future__ import annotations

import random
from typing import Any

import durable


@durable.step(retries=3, backoff=durable.Backoff(kind="exponential", initial=0.5, max=5))
def charge_card(order_id: str, amount: float) -> dict[str, Any]:
    """Pretend to call a payment provider; fails now and then to show retries."""
    step = durable.current_step()
    if step is not None and step.attempt == 1 and random.random() < 0.3:
        raise ConnectionError("payment provider timed out")
    return {"charge_id": f"ch_{order_id}", "amount": amount, "idempotency_key": step.step_id if step else None}


@durable.step
def reserve_stock(items: list[str]) -> list[str]:
    return [f"reserved:{item}" for item in items]


@durable.step(retries=2)
def ship(order_id: str, address: str) -> str:
    if not address:
        raise durable.FatalError("no shipping address", code="no_address")
    return f"TRACK-{order_id.upper()}"


@durable.workflow(name="order", tags=["shop"])
def order(ctx: durable.WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
    """Charge, reserve, wait a moment for fraud review, then ship."""
    charge = ctx.step(charge_card, data["order_id"], data["amount"])
    reserved = ctx.step(reserve_stock, data.get("items", []))
    ctx.sleep("3s")
    tracking = ctx.step(ship, data["order_id"], data.get("address", ""))
    return {"charge": charge, "reserved": reserved, "tracking": tracking}


@durable.workflow(name="onboarding", timeout="7d")
def onboarding(ctx: durable.WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
    """Welcome a user, then wait (up to a day) for them to confirm their e-mail."""
    user = data["email"]
    token = ctx.uuid()
    ctx.local_step("send_welcome", lambda: f"welcome mail to {user} with token {token}")
    try:
        confirmation = ctx.wait_signal("email_confirmed", timeout="1d")
    except durable.SignalTimeout:
        ctx.local_step("send_reminder", lambda: f"reminder to {user}")
        return {"user": user, "confirmed": False}
    return {"user": user, "confirmed": True, "at": confirmation}


@durable.workflow(name="countdown")
def countdown(ctx: durable.WorkflowContext, n: int = 3) -> list[str]:
    """Tick once a second, recording the time of each tick."""
    ticks = []
    for _ in range(n or 3):
        ticks.append(ctx.now().isoformat())
        ctx.sleep("1s")
    return ticks
