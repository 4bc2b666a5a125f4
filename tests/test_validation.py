"""Bad input to every public function: a clear error, and nothing written."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

import durable
from durable.models import BufferedSignal, Checkpoint, Run
from durable.testing import FakeClock, run_until_settled

pytestmark = pytest.mark.django_db


@durable.workflow(name="v_takes_dict", validate=lambda d: d if isinstance(d, dict) and "n" in d else int("x"))
def v_takes_dict(ctx, data):
    return data


@durable.workflow(name="v_sleep_bad")
def v_sleep_bad(ctx):
    ctx.sleep("forever")


@durable.workflow(name="v_step_unregistered")
def v_step_unregistered(ctx):
    ctx.step(print, "hi")


@durable.workflow(name="v_step_bad_args")
def v_step_bad_args(ctx):
    ctx.step("t_add", object(), 1)


def nothing_written() -> bool:
    return not Run.objects.exists() and not Checkpoint.objects.exists() and not BufferedSignal.objects.exists()


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("no_such_workflow",), {}, durable.WorkflowNotFound, "no workflow named 'no_such_workflow'"),
        ((42,), {}, durable.WorkflowNotFound, "neither a registered workflow"),
        (("v_takes_dict", {"n": object()}), {}, durable.InvalidInput, "JSON-serialisable"),
        (("v_takes_dict", {"n": float("nan")}), {}, durable.InvalidInput, "JSON"),
        (("v_takes_dict", "not a dict"), {}, durable.InvalidInput, "refused by workflow 'v_takes_dict'"),
        (("v_takes_dict", {"n": 1}), {"run_id": ""}, durable.InvalidInput, "run_id"),
        (("v_takes_dict", {"n": 1}), {"run_id": "has space"}, durable.InvalidInput, "run_id"),
        (("v_takes_dict", {"n": 1}), {"run_id": 7}, durable.InvalidInput, "run_id"),
        (("v_takes_dict", {"n": 1}), {"run_id": "x" * 256}, durable.InvalidInput, "run_id"),
        (("v_takes_dict", {"n": 1}), {"tags": "one"}, durable.InvalidInput, "tags"),
        (("v_takes_dict", {"n": 1}), {"tags": [1]}, durable.InvalidInput, "tag"),
        (("v_takes_dict", {"n": 1}), {"namespace": ""}, durable.InvalidInput, "namespace"),
        (("v_takes_dict", {"n": 1}), {"search_attributes": [1]}, durable.InvalidInput, "search_attributes"),
        (("v_takes_dict", {"n": 1}), {"priority": "high"}, durable.InvalidInput, "priority"),
        (("t_noinput", {"unexpected": 1}), {}, durable.InvalidInput, "takes no input"),
    ],
)
def test_start_refuses_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        durable.start(*args, **kwargs)
    assert nothing_written()


def test_start_refuses_oversized_input():
    with override_settings(DURABLE={"TRANSPORT": "manual", "MAX_PAYLOAD_BYTES": 100}):
        with pytest.raises(durable.InvalidInput, match="limit is 100"):
            durable.start("v_takes_dict", {"n": "x" * 200})
    assert nothing_written()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("missing", "go"), durable.RunNotFound),
        ((None, "go"), durable.InvalidInput),
        (("r", ""), durable.InvalidInput),
        (("r", "two words"), durable.InvalidInput),
        (("r", 5), durable.InvalidInput),
        (("r", "go", {1, 2}), durable.InvalidInput),
    ],
)
def test_signal_refuses_bad_input(args, error):
    with pytest.raises(error):
        durable.signal(*args)
    assert nothing_written()


@pytest.mark.parametrize("fn", [durable.get_run, durable.cancel])
def test_get_and_cancel_refuse_bad_ids(fn):
    with pytest.raises(durable.RunNotFound, match="no run with id 'missing'"):
        fn("missing")
    with pytest.raises(durable.InvalidInput):
        fn(None)
    assert nothing_written()


def test_run_until_settled_refuses_bad_arguments():
    with pytest.raises(durable.RunNotFound):
        run_until_settled("missing")
    with pytest.raises(durable.InvalidInput):
        run_until_settled("x", timeout=-1)


def test_fake_clock_refuses_naive_and_backwards_times():
    with pytest.raises(durable.InvalidInput):
        FakeClock(dt.datetime(2030, 1, 1))
    fc = FakeClock()
    with pytest.raises(durable.InvalidInput):
        fc.set(fc.now() - dt.timedelta(seconds=1))


def test_bad_durable_call_inside_a_workflow_fails_the_run_clearly():
    run = run_until_settled(durable.start("v_sleep_bad"))
    assert run.status == "failed"
    assert run.error["type"] == "InvalidInput" and "invalid duration 'forever'" in run.error["message"]


def test_unregistered_step_fails_the_run_clearly():
    run = run_until_settled(durable.start("v_step_unregistered"))
    assert run.status == "failed"
    assert run.error["type"] == "StepNotFound" and "@durable.step" in run.error["message"]
    assert not Checkpoint.objects.filter(run_id=run.id).exists()


def test_non_json_step_arguments_fail_the_run_before_dispatch():
    run = run_until_settled(durable.start("v_step_bad_args"))
    assert run.status == "failed"
    assert "arguments of step 't_add'" in run.error["message"]
    assert not Checkpoint.objects.filter(run_id=run.id).exists()


def test_heartbeat_and_current_step_outside_a_step_are_harmless():
    assert durable.current_step() is None
    assert durable.heartbeat({"x": 1}) is False
