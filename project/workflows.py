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


@durable.workflow(
    name="order_followup",
    on_event=["run.completed:order", "run.failed:order"],
    input=lambda event: {"order_run": event["run_id"], "ending": event["ending"], "error": event["error"]},
)
def order_followup(ctx: durable.WorkflowContext, data: dict[str, Any]) -> str:
    """Started by every order that completes or fails (a lifecycle subscriber)."""
    if data["ending"] == "completed":
        return ctx.local_step("thank_you_mail", lambda: f"thanks for order run {data['order_run']}")
    reason = (data["error"] or {}).get("message", "unknown")
    return ctx.local_step("support_ticket", lambda: f"ticket for {data['order_run']}: {reason}")


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


# -- Trip booking: a fan-out, a saga, child workflows and a named event --------------------
#
# `trip` asks for three quotes at once (a fan-out of dispatched steps), books the flight,
# the hotel and a car (a saga: each booking declares how to undo it), charges the card,
# then issues one ticket per traveller (child workflows, also fanned out) and publishes
# `trip.booked`, which starts `trip_loyalty`. A declined card fails the charge: the car,
# the hotel and the flight are released, newest first, and the run's error lists each undo.

PRICES = {"flight": 180.0, "hotel": 95.0, "car": 40.0}  # per traveller / per night / per night
DECLINED_CARD = "4000000000000002"  # the fake payment provider declines this one


@durable.step
def quote_trip_item(kind: str, destination: str, nights: int, travellers: int) -> dict[str, Any]:
    units = travellers if kind == "flight" else nights
    return {"kind": kind, "destination": destination, "price": PRICES[kind] * units}


@durable.step
def cancel_flight(input: dict[str, Any], output: str) -> str:
    """Undo of ``book_flight``: receives its call (``{"args": [...], "kwargs": {...}}``) and result."""
    return f"released {output}"


@durable.step(compensate=cancel_flight)
def book_flight(destination: str, travellers: list[str]) -> str:
    return f"FL-{destination[:3].upper()}-{len(travellers)}"


@durable.step
def cancel_hotel(input: dict[str, Any], output: str) -> str:
    return f"released {output}"


@durable.step
def book_hotel(destination: str, nights: int) -> str:
    return f"HT-{destination[:3].upper()}-{nights}N"


def hold_car(destination: str) -> str:
    return f"CAR-{destination[:3].upper()}"


def release_car(input: dict[str, Any], output: str) -> str:
    return f"released {output}"


@durable.step
def charge_trip(card: str, amount: float) -> dict[str, Any]:
    if card == DECLINED_CARD:
        raise durable.FatalError(f"card ending {card[-4:]} was declined", code="card_declined")
    return {"card": card[-4:], "amount": amount}


@durable.workflow(name="trip_ticket")
def trip_ticket(ctx: durable.WorkflowContext, data: dict[str, Any]) -> str:
    """A child of ``trip``: one e-ticket per traveller."""
    number = ctx.local_step("issue", lambda: f"{data['flight']}-{data['traveller'].upper()}")
    ctx.local_step("email", lambda: f"ticket {number} sent to {data['traveller']}")
    return str(number)


@durable.workflow(name="trip", tags=["travel"])
def trip(ctx: durable.WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
    """Quote, book (undone on failure), charge, issue tickets, announce."""
    where, nights, people = data["destination"], data["nights"], data["travellers"]
    ctx.upsert_search_attributes({"destination": where, "travellers": len(people)})
    ctx.set_event("stage", "quoting")
    quotes = ctx.gather(  # three steps dispatched in one turn; results in this order
        durable.call(quote_trip_item, "flight", where, nights, len(people)),
        durable.call(quote_trip_item, "hotel", where, nights, len(people)),
        durable.call(quote_trip_item, "car", where, nights, len(people)),
    )
    total = sum(q["price"] for q in quotes)

    ctx.set_event("stage", "booking")
    flight = ctx.step(book_flight, where, people)  # undo declared on the step
    hotel = ctx.step(book_hotel, where, nights, compensate=cancel_hotel)  # undo given per call
    car = ctx.local_step("hold_car", hold_car, where, compensate=release_car)  # in-process undo
    payment = ctx.step(charge_trip, data["card"], total)  # a declined card undoes car, hotel, flight

    ctx.set_event("stage", "ticketing")
    tickets = ctx.gather(*[durable.child_call(trip_ticket, {"traveller": p, "flight": flight}) for p in people])

    def announce() -> list[str]:
        # The event id is derived from the run, so running this again publishes nothing twice.
        event = {"trip": ctx.run_id, "travellers": people}
        return durable.publish_event("trip.booked", event, id=f"{ctx.run_id}.booked").started

    ctx.local_step("announce", announce)  # starts trip_loyalty
    ctx.set_event("stage", "booked")
    return {"total": total, "flight": flight, "hotel": hotel, "car": car, "payment": payment, "tickets": tickets}


@durable.workflow(name="trip_loyalty", on_event=["trip.booked"])
def trip_loyalty(ctx: durable.WorkflowContext, event: dict[str, Any]) -> dict[str, Any]:
    """Started by each ``trip.booked`` event (run id ``<event id>:trip_loyalty``)."""
    points = ctx.local_step("award_points", lambda: 100 * len(event["travellers"]))
    return {"trip": event["trip"], "points": points}
