"""OpenTelemetry traces and metrics in one process, with the SDK's in-memory exporter and reader."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from opentelemetry import trace

import durable
from durable.testing import drive, fake_clock, flush_telemetry, run_until_settled
from tests.otel_kit import install, points

pytestmark = pytest.mark.django_db

OTEL = {"TRANSPORT": "manual", "LEASE": 30, "OPENTELEMETRY": True}


@pytest.fixture
def otel():
    exporter, reader = install()
    exporter.clear()
    with override_settings(DURABLE=OTEL):
        yield exporter, reader


@durable.step(name="otel.charge")
def otel_charge(x: int) -> int:
    if x < 0:
        raise durable.FatalError("negative")
    return x * 2


@durable.workflow(name="otel_flow")
def otel_flow(ctx, x):
    a = ctx.step(otel_charge, x)
    ctx.sleep("1h")
    ok = ctx.wait_signal("approve")
    b = ctx.local_step("note", lambda: a + 1)
    c = ctx.step(otel_charge, b)
    return {"a": a, "b": b, "c": c, "ok": ok}


@durable.workflow(name="otel_parent")
def otel_parent(ctx):
    return ctx.child(otel_flow, -1)


def attrs(span: Any) -> dict[str, Any]:
    return {k.removeprefix("durable."): v for k, v in (span.attributes or {}).items()}


def delta(before: dict, after: dict) -> dict:
    return {key: after[key] - before.get(key, 0) for key in after if after[key] != before.get(key, 0)}


def workload(clock) -> str:
    run_id = durable.start(otel_flow, 3)
    drive()  # turn 1 dispatches the step; the step runs
    drive()  # turn 2 sleeps
    clock.advance(timedelta(hours=2))
    drive()  # turn 3 waits for the signal
    durable.signal(run_id, "approve", True)
    return run_id


def test_one_trace_covers_the_start_every_turn_and_every_step(otel):
    exporter, _ = otel
    tracer = trace.get_tracer("test")
    with fake_clock() as clock:
        with tracer.start_as_current_span("request") as request:
            run_id = workload(clock)
        run = run_until_settled(run_id)
    assert run.output == {"a": 6, "b": 7, "c": 14, "ok": True}
    flush_telemetry()  # the local step's span is built off the engine's thread
    spans = [s for s in exporter.get_finished_spans() if attrs(s).get("run_id") == run_id or s.name == "request"]
    assert {s.context.trace_id for s in spans} == {request.get_span_context().trace_id}
    by_name = Counter(s.name for s in spans)
    assert by_name == {"request": 1, "durable.start": 1, "durable.turn": 5, "durable.step": 3}
    start = next(s for s in spans if s.name == "durable.start")
    assert start.parent.span_id == request.get_span_context().span_id
    turns = [s for s in spans if s.name == "durable.turn"]
    assert {s.parent.span_id for s in turns} == {start.context.span_id}
    assert [attrs(t)["outcome"] for t in sorted(turns, key=lambda t: t.start_time)] == [
        "suspended",
        "suspended",
        "suspended",
        "suspended",
        "completed",
    ]
    steps = {(attrs(s)["step"], attrs(s)["mode"]): s for s in spans if s.name == "durable.step"}
    assert set(steps) == {("otel.charge", "dispatched"), ("note", "local")}
    local = steps[("note", "local")]
    assert local.parent.span_id in {t.context.span_id for t in turns}  # run by its turn
    dispatched = [s for s in spans if s.name == "durable.step" and attrs(s)["mode"] == "dispatched"]
    assert [(attrs(s)["seq"], attrs(s)["attempt"], attrs(s)["outcome"]) for s in dispatched] == [
        (1, 1, "completed"),
        (5, 1, "completed"),
    ]
    assert all(attrs(s)["workflow"] == "otel_flow" and attrs(s)["run_id"] == run_id for s in dispatched)


def test_errors_are_recorded_and_a_child_joins_its_parents_trace(otel):
    exporter, _ = otel
    with fake_clock():
        run_id = durable.start(otel_parent)
        run_until_settled(run_id)
    flush_telemetry()
    spans = exporter.get_finished_spans()
    mine = [s for s in spans if attrs(s).get("run_id", "").startswith(run_id)]
    assert len({s.context.trace_id for s in mine}) == 1
    failed = [s for s in mine if s.name == "durable.step" and attrs(s)["outcome"] == "failed"]
    assert len(failed) == 1 and failed[0].status.status_code.name == "ERROR"
    assert [e.name for e in failed[0].events] == ["exception"]
    child_turns = [s for s in mine if s.name == "durable.turn" and attrs(s)["workflow"] == "otel_flow"]
    parent_turns = {
        s.context.span_id for s in mine if s.name == "durable.turn" and attrs(s)["workflow"] == "otel_parent"
    }
    # The child's start is a span of the parent's first turn; the child's turns continue it.
    (child_start,) = [s for s in mine if s.name == "durable.start" and attrs(s)["workflow"] == "otel_flow"]
    assert child_start.parent.span_id in parent_turns and attrs(child_start)["parent_id"] == run_id
    assert child_turns and {s.parent.span_id for s in child_turns} == {child_start.context.span_id}


def test_metrics_count_a_known_workload_exactly(otel):
    _, reader = otel
    names = ("durable.runs.started", "durable.runs.finished", "durable.step.attempts", "durable.turn.duration")
    before = {name: points(reader, name) for name in names}
    with fake_clock() as clock:
        ids = [workload(clock) for _ in range(2)]
        for run_id in ids:
            run_until_settled(run_id)
        failing = durable.start(otel_parent)
        run_until_settled(failing)
    got = {name: delta(before[name], points(reader, name)) for name in names}
    assert got["durable.runs.started"] == {(("workflow", "otel_flow"),): 3, (("workflow", "otel_parent"),): 1}
    assert got["durable.runs.finished"] == {
        (("status", "completed"), ("workflow", "otel_flow")): 2,
        (("status", "failed"), ("workflow", "otel_flow")): 1,
        (("status", "failed"), ("workflow", "otel_parent")): 1,
    }
    assert got["durable.step.attempts"] == {
        (("mode", "dispatched"), ("outcome", "completed"), ("step", "otel.charge")): 4,
        (("mode", "dispatched"), ("outcome", "failed"), ("step", "otel.charge")): 1,
        (("mode", "local"), ("outcome", "completed"), ("step", "note")): 2,
    }
    turns = got["durable.turn.duration"]
    assert turns[(("outcome", "completed"), ("workflow", "otel_flow"))] == 2
