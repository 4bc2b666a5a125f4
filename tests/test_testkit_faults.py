"""The test kit's failure injection: inject_failure and inject_crash on local, eager and dispatched steps."""

from __future__ import annotations

from collections import Counter

import pytest
from django.test import override_settings

import durable
from durable.models import Checkpoint
from durable.testing import SimulatedCrash, fake_clock, inject_crash, inject_failure, run_until_settled

pytestmark = pytest.mark.django_db

executions: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset():
    executions.clear()


@durable.step(name="kit.pay", retries=2, backoff=0)
def kit_pay(amount: int) -> int:
    executions["kit.pay"] += 1
    return amount


@durable.step(name="kit.once")
def kit_once(amount: int) -> int:
    executions["kit.once"] += 1
    return amount


@durable.workflow(name="kit.flow")
def kit_flow(ctx: durable.WorkflowContext, amount: int) -> dict[str, int]:
    paid = ctx.step(kit_pay, amount)
    noted = ctx.local_step("kit.note", lambda: executions.update(["kit.note"]) or paid + 1)
    return {"paid": paid, "noted": noted}


@durable.workflow(name="kit.strict")
def kit_strict(ctx: durable.WorkflowContext, amount: int) -> int:
    return ctx.step(kit_once, amount)


def attempts(run_id: str, name: str) -> int:
    return Checkpoint.objects.get(run_id=run_id, name=name).attempts


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "dispatched"])
def test_an_injected_failure_goes_through_the_steps_retries(eager):
    with override_settings(DURABLE={"TRANSPORT": "manual", "LEASE": 30, "EAGER_STEPS": eager}), fake_clock():
        with inject_failure(kit_pay, times=2) as injected:
            run = run_until_settled(durable.start(kit_flow, 5))
        assert run.status == "completed", run.error
        assert run.output == {"paid": 5, "noted": 6}
        assert injected.hits == 2
        assert executions["kit.pay"] == 1  # the injected attempts did not run the body
        assert attempts(run.id, "kit.pay") == 3


def test_an_injected_failure_past_the_retries_fails_the_run_with_its_error():
    with fake_clock(), inject_failure(kit_pay, times=3, error=ValueError("boom")):
        run = run_until_settled(durable.start(kit_flow, 5))
    assert run.status == "failed"
    assert run.error["step"]["error"]["message"] == "boom"
    assert executions["kit.pay"] == 0


def test_a_local_step_is_injected_by_its_name():
    with fake_clock(), inject_failure("kit.note", error=durable.FatalError("no")):
        run = run_until_settled(durable.start(kit_flow, 1))
    assert run.status == "failed"
    assert executions["kit.note"] == 0 and executions["kit.pay"] == 1


def test_a_crash_after_a_local_step_runs_it_again_on_recovery():
    with fake_clock(), inject_crash("kit.note") as crash:
        run = run_until_settled(durable.start(kit_flow, 2))
    assert run.status == "completed", run.error
    assert crash.hits == 1
    assert executions["kit.note"] == 2  # at least once: the crash lost its result
    assert executions["kit.pay"] == 1  # the step before it was checkpointed


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "dispatched"])
def test_a_crash_after_a_dispatched_step_counts_an_attempt_and_runs_it_again(eager):
    with override_settings(DURABLE={"TRANSPORT": "manual", "LEASE": 30, "EAGER_STEPS": eager}), fake_clock():
        with inject_crash(kit_pay) as crash:
            run = run_until_settled(durable.start(kit_flow, 3))
        assert run.status == "completed", run.error
        assert crash.hits == 1
        assert executions["kit.pay"] == 2
        assert attempts(run.id, "kit.pay") == 2


def test_a_crash_of_a_step_without_retries_ends_it_worker_lost():
    with fake_clock(), inject_crash(kit_once):
        run = run_until_settled(durable.start(kit_strict, 3))
    assert run.status == "failed"
    assert run.error["step"]["error"]["code"] == "worker_lost"
    assert executions["kit.once"] == 1


def test_the_crash_escapes_a_workflows_except_exception():
    assert issubclass(SimulatedCrash, BaseException) and not issubclass(SimulatedCrash, Exception)


def test_injections_end_with_their_block_and_refuse_bad_arguments():
    with inject_failure(kit_pay):
        pass
    with fake_clock():
        run = run_until_settled(durable.start(kit_flow, 4))
    assert run.status == "completed" and executions["kit.pay"] == 1
    with pytest.raises(durable.InvalidInput, match="times"):
        with inject_failure(kit_pay, times=0):
            pass
    with pytest.raises(durable.InvalidInput, match="step name"):
        inject_crash(42)
