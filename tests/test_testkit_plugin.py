"""The test kit's pytest fixtures (durable_clock, durable_drive, durable_replay) and its assertion helpers."""

from __future__ import annotations

import pytest

import durable
from durable.testing import assert_completed, assert_step_called

pytestmark = pytest.mark.django_db


@durable.step(name="kp.add")
def kp_add(a: int, b: int) -> int:
    return a + b


@durable.workflow(name="kp.flow")
def kp_flow(ctx: durable.WorkflowContext, x: int) -> int:
    total = ctx.step(kp_add, x, 1)
    ctx.sleep("2d")
    total = ctx.step(kp_add, total, 1)
    return ctx.local_step("kp.double", lambda: total * 2)


@durable.workflow(name="kp.fails")
def kp_fails(ctx: durable.WorkflowContext) -> None:
    raise ValueError("nope")


def test_the_fixtures_drive_a_sleeping_run_to_its_end_and_replay_it(durable_clock, durable_drive, durable_replay):
    run_id = durable.start(kp_flow, 1)
    assert durable_drive(run_id).status == "suspended"
    durable_clock.advance("2d")
    assert durable_drive(run_id).status == "completed"
    assert not any(durable_drive.tick().values())  # nothing left to do
    assert durable_replay() == 1
    assert durable_replay(run_id) == 1


def test_the_drive_fixture_switches_to_the_manual_transport_and_keeps_the_other_settings(durable_drive):
    from durable import runtime

    assert runtime.settings().transport == "manual"
    assert runtime.settings().lease == 30  # tests/settings.py's value, kept


def test_assert_completed_returns_the_run_or_says_what_it_is(durable_clock, durable_drive):
    run_id = durable.start(kp_flow, 2)
    durable_drive(run_id)
    with pytest.raises(AssertionError, match="is suspended, not completed"):
        assert_completed(run_id)
    durable_clock.advance("2d")
    durable_drive(run_id)
    assert assert_completed(run_id).output == 8
    failed = durable.start(kp_fails)
    durable_drive(failed)
    with pytest.raises(AssertionError, match="is failed, not completed: nope"):
        assert_completed(failed)


def test_assert_step_called_counts_calls_by_function_or_name(durable_clock, durable_drive):
    run_id = durable.start(kp_flow, 3)
    durable_drive(run_id)
    durable_clock.advance("2d")
    durable_drive(run_id)
    assert assert_step_called(run_id, kp_add, times=2) == 2
    assert assert_step_called(run_id, "kp.double") == 1
    with pytest.raises(AssertionError, match=r"called step 'kp.add' 2 time\(s\), expected 3"):
        assert_step_called(run_id, kp_add, times=3)
    with pytest.raises(AssertionError, match=r"steps called: \['kp.add', 'kp.double'\]"):
        assert_step_called(run_id, "kp.missing")


def test_the_plugin_module_imports_without_django_settings():
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin"}  # no DJANGO_SETTINGS_MODULE: as pytest loads entry points
    code = "import durable.pytest_plugin, sys; print(sorted(m for m in sys.modules if m.startswith('django.db')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=".")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # nothing of the ORM imported
