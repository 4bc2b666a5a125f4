"""assert_replayable: recorded histories against changed code, exports and the example project's workflows."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

import durable
from durable.models import Checkpoint, Run
from durable.testing import (
    ReplayDivergence,
    assert_replayable,
    export_history,
    fake_clock,
    load_history,
    run_until_settled,
)

pytestmark = pytest.mark.django_db

bodies: list[str] = []


@durable.step(name="rk.a")
def rk_a(x: int) -> int:
    bodies.append("a")
    return x + 1


@durable.step(name="rk.b")
def rk_b(x: int) -> int:
    bodies.append("b")
    return x * 2


@durable.workflow(name="rk.original")
def rk_original(ctx: durable.WorkflowContext, x: int) -> int:
    a = ctx.step(rk_a, x)
    ctx.sleep("1h")
    return ctx.step(rk_b, a)


# The same workflow after four kinds of change (replayed against the original's history).
@durable.workflow(name="rk.reordered")
def rk_reordered(ctx: durable.WorkflowContext, x: int) -> int:
    b = ctx.step(rk_b, x)
    ctx.sleep("1h")
    return ctx.step(rk_a, b)


@durable.workflow(name="rk.renamed")
def rk_renamed(ctx: durable.WorkflowContext, x: int) -> int:
    a = ctx.local_step("rk.a_inline", lambda: x + 1)
    ctx.sleep("1h")
    return ctx.step(rk_b, a)


@durable.workflow(name="rk.no_sleep")
def rk_no_sleep(ctx: durable.WorkflowContext, x: int) -> int:
    return ctx.step(rk_b, ctx.step(rk_a, x))


@durable.workflow(name="rk.shorter")
def rk_shorter(ctx: durable.WorkflowContext, x: int) -> int:
    a = ctx.step(rk_a, x)
    ctx.sleep("1h")
    return a


@durable.workflow(name="rk.longer")
def rk_longer(ctx: durable.WorkflowContext, x: int) -> int:
    a = ctx.step(rk_a, x)
    ctx.sleep("1h")
    b = ctx.step(rk_b, a)
    return ctx.step(rk_b, b)  # new ground: a finished run's history ends before it


@durable.workflow(name="rk.guarded")
def rk_guarded(ctx: durable.WorkflowContext, x: int) -> int:
    a = ctx.step(rk_a, x)
    try:
        ctx.sleep("1h")
    except Exception:  # a divergence must not be hidden by user code
        pass
    return ctx.step(rk_b, a)


def finished(x: int = 1) -> str:
    with fake_clock() as clock:
        run_id = durable.start(rk_original, x)
        run_until_settled(run_id)
        clock.advance("1h")
        assert run_until_settled(run_id).status == "completed"
    bodies.clear()
    return run_id


def as_if(doc: dict, workflow: str) -> dict:
    return {**doc, "run": {**doc["run"], "workflow": workflow}}


def test_the_unchanged_code_replays_a_finished_run_without_running_anything():
    run_id = finished()
    replayed = assert_replayable(run_id)
    assert (replayed.positions, replayed.stopped) == (3, "returned")
    assert bodies == []
    assert Checkpoint.objects.filter(run_id=run_id).count() == 3  # nothing written


@pytest.mark.parametrize(
    ("workflow", "position", "recorded", "code"),
    [
        ("rk.reordered", 1, "step 'rk.a'", "step 'rk.b'"),
        ("rk.renamed", 1, "step 'rk.a'", "local 'rk.a_inline'"),
        ("rk.no_sleep", 2, "sleep", "step 'rk.b'"),
        ("rk.shorter", 3, "step 'rk.b'", None),
    ],
    ids=["reordered", "renamed", "removed-sleep", "removed-last-step"],
)
def test_a_changed_workflow_is_caught_at_its_first_diverging_position(workflow, position, recorded, code):
    doc = export_history(finished())
    with pytest.raises(ReplayDivergence) as caught:
        assert_replayable(as_if(doc, workflow))
    assert caught.value.position == position
    assert caught.value.recorded.startswith(recorded)
    assert caught.value.code == code
    assert bodies == []


def test_a_divergence_is_reported_even_when_the_workflow_swallows_it():
    run_id = durable.start(rk_original, 1)
    with fake_clock():
        run_until_settled(run_id)
    doc = export_history(run_id)
    doc["checkpoints"][1]["kind"] = "signal"  # the history says a signal wait where the code sleeps
    with pytest.raises(ReplayDivergence, match="position 2"):
        assert_replayable(as_if(doc, "rk.guarded"))


def test_a_run_in_flight_replays_up_to_where_it_waits_and_new_code_after_it_is_fine():
    with fake_clock():
        run_id = durable.start(rk_original, 1)
        assert run_until_settled(run_id).status == "suspended"
    bodies.clear()
    assert assert_replayable(run_id).stopped == "waiting"
    assert assert_replayable(as_if(export_history(run_id), "rk.longer")).positions == 2
    assert bodies == []


def test_a_finished_run_does_not_replay_code_that_adds_an_operation_after_its_end():
    with pytest.raises(ReplayDivergence, match="position 4") as caught:
        assert_replayable(as_if(export_history(finished()), "rk.longer"))
    assert caught.value.recorded is None


def test_the_export_command_round_trips_through_a_file(tmp_path):
    run_id = finished(5)
    out = StringIO()
    path = tmp_path / "run.json"
    call_command("durable_export", run_id, "--output", str(path), stdout=out)
    assert "3 checkpoint(s)" in out.getvalue()
    doc = load_history(path)
    assert doc["run"]["id"] == run_id and [c["name"] for c in doc["checkpoints"]] == ["rk.a", "sleep", "rk.b"]
    Run.objects.all().delete()  # replay needs only the file
    assert assert_replayable(load_history(str(path))).stopped == "returned"
    stdout = StringIO()
    with pytest.raises(CommandError, match="no run"):
        call_command("durable_export", "nope", stdout=stdout)


def test_bad_exports_are_refused_clearly(tmp_path):
    with pytest.raises(durable.InvalidInput, match="cannot read"):
        load_history(tmp_path / "missing.json")
    with pytest.raises(durable.InvalidInput, match="not an exported history"):
        load_history(json.dumps({"format": "other"}))
    with pytest.raises(durable.RunNotFound):
        assert_replayable("no-such-run")


def _settle_everything(clock) -> None:
    from durable.testing import drive

    for _ in range(200):
        if not any(drive().values()):
            if not Run.objects.exclude(status__in=["completed", "failed", "cancelled", "dead"]).exists():
                return
            clock.advance("1h")  # the next timer (sleeps, retries, signal timeouts)


def test_every_example_workflow_replays_in_flight_and_once_finished():
    with fake_clock() as clock:
        call_command("durable_demo", stdout=StringIO())
        for run_id in ("demo-order-1", "demo-countdown-1", "demo-trip-1", "demo-onboarding-1"):
            run_until_settled(run_id)
        in_flight = [r for r in Run.objects.all() if r.status not in ("completed", "failed")]
        assert in_flight, "some example runs wait on timers or signals"
        for run in Run.objects.all():
            assert_replayable(run.id)
        durable.signal("demo-onboarding-1", "email_confirmed", "now")
        _settle_everything(clock)
    runs = list(Run.objects.all())
    assert {r.status for r in runs} <= {"completed", "failed"}
    # Every example workflow ran (children, the order follow-up and the trip's event subscriber too).
    assert {r.workflow for r in runs} == {
        "order",
        "order_followup",
        "onboarding",
        "countdown",
        "trip",
        "trip_ticket",
        "trip_loyalty",
    }
    for run in runs:
        assert assert_replayable(run.id).stopped in ("returned", "raised"), run.id
