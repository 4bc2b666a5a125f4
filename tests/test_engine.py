"""Engine behaviour through the public API, driven in-process (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction

import durable
from durable import runtime
from durable.models import BufferedSignal, Checkpoint, Run, SignalWaiter
from durable.runtime import get_engine, registry
from durable.testing import drive, fake_clock, run_until_settled
from tests.timing import settle_advancing

pytestmark = pytest.mark.django_db

calls: Counter[str] = Counter()
flags: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    flags.clear()


def counted(name: str, value: Any = None) -> Any:
    calls[name] += 1
    return value


def checkpoints(run_id: str) -> list[tuple[int, str, str, str]]:
    return list(Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "kind", "name", "status"))


# -- workflows under test ------------------------------------------------------


@durable.step
def e_echo(value: Any) -> Any:
    calls["e_echo"] += 1
    return value


@durable.step(retries=2, backoff="fixed")
def e_always_fails() -> None:
    calls["e_always_fails"] += 1
    raise ConnectionError("down")


@durable.step(retries=5, backoff=0)
def e_fatal() -> None:
    calls["e_fatal"] += 1
    raise durable.FatalError("card declined", code="declined")


@durable.step(retries=1, backoff="30s")
def e_fails_once() -> str:
    calls["e_fails_once"] += 1
    if calls["e_fails_once"] == 1:
        raise TimeoutError("slow")
    return "second time lucky"


@durable.workflow(name="e_replay")
def e_replay(ctx, data):
    a = ctx.local_step("a", lambda: counted("a", data["x"] + 1))
    ctx.sleep("1h")
    b = ctx.step(e_echo, a * 10)
    return {"a": a, "b": b}


@durable.workflow(name="e_local_retry")
def e_local_retry(ctx, data):
    def flaky():
        calls["flaky"] += 1
        if calls["flaky"] <= data["fail_times"]:
            raise ValueError(f"attempt {calls['flaky']}")
        return calls["flaky"]

    return ctx.local_step("flaky", flaky, retries=data["retries"], backoff=data.get("backoff", 0))


@durable.workflow(name="e_step_fails")
def e_step_fails(ctx):
    ctx.step(e_always_fails)


@durable.workflow(name="e_step_fatal")
def e_step_fatal(ctx):
    ctx.step(e_fatal)


@durable.workflow(name="e_catches")
def e_catches(ctx):
    try:
        ctx.step(e_fatal)
    except durable.StepFailed as exc:
        return {"handled": exc.error["code"], "step": exc.step}


@durable.workflow(name="e_fails_once")
def e_fails_once_wf(ctx):
    return ctx.step(e_fails_once)


@durable.workflow(name="e_recorded")
def e_recorded(ctx):
    now = ctx.now()
    uid = ctx.uuid()
    picked = ctx.side_effect(lambda: counted("side", flags.setdefault("pick", 41) + 1))
    ctx.sleep("10m")
    return {"now": now.isoformat(), "uuid": uid, "picked": picked}


@durable.workflow(name="e_signals")
def e_signals(ctx, data):
    got = [ctx.wait_signal("go") for _ in range(data.get("n", 1))]
    return got


@durable.workflow(name="e_signal_timeout")
def e_signal_timeout(ctx):
    try:
        return ctx.wait_signal("approve", timeout="1h")
    except durable.SignalTimeout:
        return "timed out"


@durable.workflow(name="e_sleeper")
def e_sleeper(ctx):
    counted("before_sleep")
    ctx.sleep("1d")
    ctx.local_step("after", lambda: counted("after"))
    return "woke"


@durable.workflow(name="e_sleep_until")
def e_sleep_until(ctx, iso):
    from datetime import datetime

    ctx.sleep_until(datetime.fromisoformat(iso))
    return "done"


@durable.workflow(name="e_swallow")
def e_swallow(ctx):
    try:
        value = ctx.step(e_echo, "through")
    except Exception:
        return "swallowed"
    return value


@durable.workflow(name="e_bare_swallow")
def e_bare_swallow(ctx):
    try:
        ctx.step(e_echo, 1)
    except BaseException:
        pass
    return "should not complete"


@durable.workflow(name="e_nondet")
def e_nondet(ctx):
    ctx.local_step(flags.get("first", "a"), lambda: 1)
    ctx.sleep("1m")
    return "ok"


@durable.workflow(name="e_timeout", timeout="1h")
def e_timeout(ctx):
    ctx.sleep("2h")


@durable.workflow(name="e_bad_output")
def e_bad_output(ctx):
    return {1, 2}


@durable.workflow(name="e_validated", validate=lambda data: {"n": int(data["n"])})
def e_validated(ctx, data):
    return data["n"] * 2


@durable.workflow(name="e_heartbeat")
def e_heartbeat(ctx):
    return ctx.step(e_beats)


@durable.step
def e_beats() -> dict[str, Any]:
    info = durable.current_step()
    wrote = durable.heartbeat({"done": 50})
    again = durable.heartbeat({"done": 60})  # throttled
    return {"step_id": info.step_id, "attempt": info.attempt, "wrote": wrote, "again": again}


# -- replay --------------------------------------------------------------------


def test_completed_steps_do_not_run_again_on_replay():
    with fake_clock() as fc:
        run_id = durable.start(e_replay, {"x": 1})
        assert run_until_settled(run_id).status == "suspended"
        assert calls["a"] == 1
        fc.advance("1h")
        run = run_until_settled(run_id)
    assert run.status == "completed"
    assert run.output == {"a": 2, "b": 20}
    assert calls["a"] == 1 and calls["e_echo"] == 1
    assert checkpoints(run_id) == [
        (1, "local", "a", "completed"),
        (2, "sleep", "sleep", "completed"),
        (3, "step", "e_echo", "completed"),
    ]


def test_step_id_is_run_id_and_position():
    run = run_until_settled(durable.start(e_heartbeat, run_id="hb-1"))
    assert run.status == "completed"
    assert run.output["step_id"] == "hb-1:1"
    assert run.output["attempt"] == 1
    assert (run.output["wrote"], run.output["again"]) == (True, False)
    cp = Checkpoint.objects.get(run_id="hb-1", seq=1)
    assert cp.progress == {"done": 50} and cp.heartbeat_at is not None


def test_recorded_values_replay_identically():
    with fake_clock() as fc:
        run_id = durable.start(e_recorded)
        run_until_settled(run_id)
        first_now = Checkpoint.objects.get(run_id=run_id, seq=1).output
        flags["pick"] = 999  # a re-run of the side effect would now return 1000
        fc.advance("10m")
        run = run_until_settled(run_id)
    assert run.status == "completed"
    assert run.output["picked"] == 42 and calls["side"] == 1
    assert run.output["now"] == first_now
    assert run.output["uuid"] == Checkpoint.objects.get(run_id=run_id, seq=2).output


def test_nondeterminism_fails_the_run_with_a_clear_error():
    with fake_clock() as fc:
        run_id = durable.start(e_nondet)
        run_until_settled(run_id)
        flags["first"] = "b"  # the code now asks for another step at position 1
        fc.advance("1m")
        run = run_until_settled(run_id)
    assert run.status == "failed"
    assert run.error["code"] == "non_determinism"
    assert run.error["type"] == "NonDeterminismError"
    assert "'b'" in run.error["message"] and "'a'" in run.error["message"]


def test_user_except_exception_does_not_swallow_suspension():
    run = run_until_settled(durable.start(e_swallow))
    assert run.status == "completed" and run.output == "through"


def test_bare_except_cannot_complete_a_suspended_turn():
    run_id = durable.start(e_bare_swallow)
    drive()  # first turn: the step is dispatched, the workflow swallowed Suspend
    run = durable.get_run(run_id)
    assert run.status == "suspended"
    assert checkpoints(run_id) == [(1, "step", "e_echo", "pending")]


# -- versions ------------------------------------------------------------------


def test_runs_resume_on_their_own_version_and_new_runs_take_the_newest():
    @durable.workflow(name="e_versioned", version=1)
    def v1(ctx):
        ctx.sleep("5m")
        return "v1"

    try:
        with fake_clock() as fc:
            old = durable.start("e_versioned")
            run_until_settled(old)

            @durable.workflow(name="e_versioned", version=2)
            def v2(ctx):
                return "v2"

            new = durable.start("e_versioned")
            fc.advance("5m")
            assert run_until_settled(old).output == "v1"
            assert run_until_settled(new).output == "v2"
            assert (durable.get_run(old).version, durable.get_run(new).version) == (1, 2)
    finally:
        registry.remove("e_versioned")


def test_run_of_an_unregistered_version_is_blocked_then_resumes():
    @durable.workflow(name="e_gone", version=1)
    def gone(ctx):
        return "back"

    run_id = durable.start("e_gone")
    registry.remove("e_gone")
    drive()
    run = durable.get_run(run_id)
    assert run.status == "blocked"
    assert run.error["code"] == "workflow_not_registered"
    durable.workflow(name="e_gone", version=1)(gone)
    try:
        assert run_until_settled(run_id).output == "back"
    finally:
        registry.remove("e_gone")


# -- retries -------------------------------------------------------------------


def test_local_step_retries_until_success():
    run = run_until_settled(durable.start(e_local_retry, {"fail_times": 2, "retries": 3}))
    assert run.status == "completed" and run.output == 3
    assert calls["flaky"] == 3
    cp = Checkpoint.objects.get(run_id=run.id, seq=1)
    assert (cp.status, cp.attempts) == ("completed", 3)


def test_local_step_exhausted_retries_fail_the_run_with_step_failed():
    run = run_until_settled(durable.start(e_local_retry, {"fail_times": 10, "retries": 2}))
    assert run.status == "failed"
    assert calls["flaky"] == 3
    assert run.error["code"] == "step_failed" and run.error["step"]["attempts"] == 3
    assert run.error["step"]["error"]["message"] == "attempt 3"


def test_local_step_retry_delay_is_a_durable_timer():
    with fake_clock() as fc:
        run_id = durable.start(e_local_retry, {"fail_times": 1, "retries": 1, "backoff": "10s"})
        run = run_until_settled(run_id)
        assert run.status == "suspended" and calls["flaky"] == 1
        assert run.wake_at == Checkpoint.objects.get(run_id=run_id, seq=1).wake_at
        assert (run.wake_at - runtime.now()) == timedelta(seconds=10)
        fc.advance("9s")
        assert run_until_settled(run_id).status == "suspended" and calls["flaky"] == 1
        fc.advance("1s")
        assert run_until_settled(run_id).status == "completed" and calls["flaky"] == 2


def test_dispatched_step_retries_then_fails():
    with fake_clock() as fc:  # the fixed backoff's seconds pass in fake time
        run = settle_advancing(durable.start(e_step_fails), fc)
    assert run.status == "failed"
    assert calls["e_always_fails"] == 3
    cp = Checkpoint.objects.get(run_id=run.id, seq=1)
    assert (cp.status, cp.attempts) == ("failed", 3)
    assert cp.error["type"] == "ConnectionError"


def test_dispatched_retry_deadline_lives_on_the_checkpoint():
    with fake_clock() as fc:
        run_id = durable.start(e_fails_once_wf)
        run_until_settled(run_id)
        cp = Checkpoint.objects.get(run_id=run_id, seq=1)
        assert (cp.status, cp.attempts, cp.error["type"]) == ("pending", 1, "TimeoutError")
        assert cp.wake_at == runtime.now() + timedelta(seconds=30)
        fc.advance("29s")
        drive()
        assert calls["e_fails_once"] == 1
        fc.advance("1s")
        run = run_until_settled(run_id)
    assert run.status == "completed" and run.output == "second time lucky"
    assert calls["e_fails_once"] == 2


def test_fatal_error_stops_retries():
    run = run_until_settled(durable.start(e_step_fatal))
    assert run.status == "failed" and calls["e_fatal"] == 1
    assert run.error["step"]["error"]["code"] == "declined"


def test_step_failed_is_catchable():
    run = run_until_settled(durable.start(e_catches))
    assert run.status == "completed"
    assert run.output == {"handled": "declined", "step": "e_fatal"}


# -- timers --------------------------------------------------------------------


def test_sleep_waits_for_its_due_time():
    with fake_clock() as fc:
        run_id = durable.start(e_sleeper)
        run = run_until_settled(run_id)
        assert run.status == "suspended"
        assert run.wake_at == runtime.now() + timedelta(days=1)
        fc.advance("23h59m")
        assert run_until_settled(run_id).status == "suspended"
        fc.advance("1m")
        run = run_until_settled(run_id)
    assert run.status == "completed" and calls["before_sleep"] == 2 and calls["after"] == 1


def test_sleep_until_in_the_past_does_not_suspend():
    past = (runtime.now() - timedelta(hours=1)).isoformat()
    run_id = durable.start(e_sleep_until, past)
    drive()
    assert durable.get_run(run_id).status == "completed"


def test_sleep_until_waits_in_real_time():
    soon = (runtime.now() + timedelta(milliseconds=300)).isoformat()
    run = run_until_settled(durable.start(e_sleep_until, soon), timeout=60)
    assert run.status == "completed"


def test_cancel_during_sleep_runs_nothing_more():
    with fake_clock() as fc:
        run_id = durable.start(e_sleeper)
        run_until_settled(run_id)
        assert durable.cancel(run_id) is True
        assert durable.cancel(run_id) is False  # idempotent
        fc.advance("2d")
        drive()
        run = durable.get_run(run_id)
    assert run.status == "cancelled" and run.finished_at is not None
    assert calls["after"] == 0 and calls["before_sleep"] == 1


def test_execution_timeout_fails_the_run():
    with fake_clock() as fc:
        run_id = durable.start(e_timeout)
        run_until_settled(run_id)
        fc.advance("61m")
        run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["code"] == "timeout"


# -- signals -------------------------------------------------------------------


def test_signal_after_the_wait_wakes_the_run():
    run_id = durable.start(e_signals, {})
    assert run_until_settled(run_id).status == "suspended"
    assert list(SignalWaiter.objects.filter(run_id=run_id).values_list("name", "seq")) == [("go", 1)]
    durable.signal(run_id, "go", {"ok": True})
    run = run_until_settled(run_id)
    assert run.status == "completed" and run.output == [{"ok": True}]
    assert not SignalWaiter.objects.filter(run_id=run_id).exists()
    assert not BufferedSignal.objects.filter(run_id=run_id).exists()


def test_signals_before_the_wait_are_buffered_in_order():
    run_id = durable.start(e_signals, {"n": 2})
    durable.signal(run_id, "go", 1)
    durable.signal(run_id, "go", 2)
    durable.signal(run_id, "other", "ignored")
    run = run_until_settled(run_id)
    assert run.status == "completed" and run.output == [1, 2]
    assert list(BufferedSignal.objects.filter(run_id=run_id).values_list("name", flat=True)) == ["other"]


def test_signal_wait_times_out():
    with fake_clock() as fc:
        run_id = durable.start(e_signal_timeout)
        run = run_until_settled(run_id)
        assert Checkpoint.objects.get(run_id=run_id, seq=1).wake_at == runtime.now() + timedelta(hours=1)
        # The run itself is looked at again sooner: the reconcile fallback.
        assert run.wake_at == runtime.now() + timedelta(minutes=5)
        fc.advance("1h")
        run = run_until_settled(run_id)
    assert run.status == "completed" and run.output == "timed out"


def test_signal_beats_its_timeout():
    with fake_clock() as fc:
        run_id = durable.start(e_signal_timeout)
        run_until_settled(run_id)
        fc.advance("30m")
        durable.signal(run_id, "approve", "yes")
        run = run_until_settled(run_id)
    assert run.output == "yes"


def test_signal_errors():
    with pytest.raises(durable.RunNotFound):
        durable.signal("no-such-run", "go")
    done = run_until_settled(durable.start("t_noinput"))
    with pytest.raises(durable.InvalidRunState, match="completed"):
        durable.signal(done.id, "go")
    assert BufferedSignal.objects.count() == 0


# -- orphans and dead letters ---------------------------------------------------


def _orphan(run_id: str, attempts: int = 0) -> None:
    Run.objects.filter(id=run_id).update(
        status="running",
        locked_by="dead-worker",
        locked_until=runtime.now() - timedelta(seconds=1),
        recovery_attempts=attempts,
    )


def test_orphan_is_recovered_and_counted():
    run_id = durable.start(e_replay, {"x": 1})
    _orphan(run_id)
    drive()
    run = durable.get_run(run_id)
    assert run.recovery_attempts == 1 and run.status == "suspended"
    assert calls["a"] == 1


def test_live_lease_is_not_an_orphan():
    run_id = durable.start(e_replay, {"x": 1})
    Run.objects.filter(id=run_id).update(
        status="running", locked_by="live-worker", locked_until=runtime.now() + timedelta(seconds=30)
    )
    drive()
    assert durable.get_run(run_id).status == "running"
    assert calls["a"] == 0


def test_orphan_past_max_attempts_goes_dead():
    run_id = durable.start(e_replay, {"x": 1})
    _orphan(run_id, attempts=get_engine().settings.max_recovery_attempts)
    counts = drive()
    run = durable.get_run(run_id)
    assert counts["dead"] == 1
    assert run.status == "dead" and run.error["code"] == "max_recovery_attempts"
    assert calls["a"] == 0


def test_recovery_never_overwrites_a_cancel():
    run_id = durable.start(e_replay, {"x": 1})
    _orphan(run_id)
    durable.cancel(run_id)
    drive()
    assert durable.get_run(run_id).status == "cancelled"
    assert calls["a"] == 0


def test_failing_write_reruns_only_the_unfinished_step(monkeypatch):
    store = get_engine().store
    original = store.commit
    state = {"fail": True}

    def flaky_commit(run_id, owner, now, lease_until, writes, outcome=None):
        # Fail the commit that would record step "b" (position 2), once.
        if state["fail"] and any(w.record.name == "b" for w in writes.checkpoints):
            state["fail"] = False
            raise RuntimeError("database went away")
        return original(run_id, owner, now, lease_until, writes, outcome)

    @durable.workflow(name="e_two_local")
    def two(ctx):
        ctx.local_step("a", lambda: counted("a"))
        ctx.local_step("b", lambda: counted("b"))
        return "ok"

    monkeypatch.setattr(store, "commit", flaky_commit)
    try:
        with fake_clock() as fc:  # the abandoned turn, handed back, falls due in fake time
            run_id = durable.start("e_two_local")
            run = settle_advancing(run_id, fc)
    finally:
        registry.remove("e_two_local")
    assert run.status == "completed"
    assert (calls["a"], calls["b"]) == (1, 2)
    assert run.recovery_attempts == 1
    assert [c[2] for c in checkpoints(run_id)] == ["a", "b"]


# -- start ---------------------------------------------------------------------


def test_start_is_idempotent_on_run_id():
    first = durable.start(e_signals, {}, run_id="same-id")
    second = durable.start(e_signals, {"n": 5}, run_id="same-id")
    assert first == second == "same-id"
    assert Run.objects.filter(id="same-id").count() == 1
    assert durable.get_run("same-id").input == {}


def test_start_inside_a_rolled_back_transaction_creates_nothing():
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            durable.start(e_signals, {}, run_id="rolled-back")
            assert Run.objects.filter(id="rolled-back").exists()
            raise RuntimeError("business write failed")
    assert not Run.objects.filter(id="rolled-back").exists()


def test_start_records_tags_namespace_and_validated_input():
    run_id = durable.start(e_validated, {"n": "21"}, tags=["x", "x", "y"], namespace="billing")
    run = durable.get_run(run_id)
    assert (run.input, run.tags, run.namespace, run.status) == ({"n": 21}, ["x", "y"], "billing", "pending")
    assert run_until_settled(run_id).output == 42


def test_non_json_workflow_output_fails_the_run():
    run = run_until_settled(durable.start(e_bad_output))
    assert run.status == "failed" and run.error["code"] == "invalid_output"


def test_worker_command_runs_one_pass(capsys):
    run_id = durable.start("t_noinput")
    call_command("durable_worker", "--once")
    assert durable.get_run(run_id).status == "completed"
    assert "turns=1" in capsys.readouterr().out


def test_migrations_are_in_sync():
    call_command("makemigrations", "durable", "--check", "--dry-run", verbosity=0)


@durable.workflow(name="e_nondet_swallowed")
def e_nondet_swallowed(ctx):
    try:
        ctx.local_step(flags.get("first", "a"), lambda: 1)
    except Exception:
        return "swallowed"
    ctx.sleep("1m")
    return "ok"


def test_nondeterminism_cannot_be_swallowed_by_user_code():
    with fake_clock() as fc:
        run_id = durable.start(e_nondet_swallowed)
        run_until_settled(run_id)
        flags["first"] = "b"
        fc.advance("1m")
        run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["code"] == "non_determinism"
