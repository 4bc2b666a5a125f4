"""External completions: ctx.wait_for_callback, complete_callback / fail_callback, and ctx.breakpoint."""

from __future__ import annotations

from typing import Any

import pytest

import durable
from durable.engine import callbacks
from durable.models import BufferedSignal, Checkpoint, Run
from durable.runtime import get_engine
from durable.testing import fake_clock, run_until_settled
from tests.threads import concurrently

behaviour: dict[str, Any] = {}
sent: list[str] = []


@pytest.fixture(autouse=True)
def _reset():
    behaviour.clear()
    sent.clear()


def hand_out(url: str) -> str:
    sent.append(url)
    return url


@durable.workflow(name="cb_approval")
def cb_approval(ctx, data):
    cb = ctx.wait_for_callback(behaviour.get("name", "approval"), timeout=data.get("timeout"))
    ctx.local_step("send", hand_out, cb.url)
    if data.get("sleep"):
        ctx.sleep(data["sleep"])
    try:
        return {"approved": cb.wait(), "token": cb.token}
    except durable.CallbackTimeout as exc:
        return {"timed_out": exc.seq}
    except durable.CallbackFailed as exc:
        return {"failed": exc.error}


@durable.workflow(name="cb_unwaited")
def cb_unwaited(ctx):
    return ctx.wait_for_callback().token


@durable.workflow(name="bp_review")
def bp_review(ctx, data):
    first = ctx.local_step("prepare", lambda: sent.append("prepare") or 1)
    ctx.breakpoint(behaviour.get("label", "before charge"))
    ctx.local_step("charge", lambda: sent.append("charge"))
    ctx.breakpoint("after charge")
    return first


def key() -> bytes:
    return get_engine().settings.callback_secret


def token_of(run_id: str) -> str:
    return callbacks.make_token(key(), run_id, 1)


def checkpoints(run_id: str) -> list[tuple[int, str, str, str]]:
    rows = Checkpoint.objects.filter(run_id=run_id).order_by("seq")
    return list(rows.values_list("seq", "kind", "name", "status"))


# -- callbacks ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_handle_has_a_signed_deterministic_token_and_url_and_wait_returns_the_payload():
    run_id = durable.start(cb_approval, {}, run_id="cb-1")
    assert run_until_settled(run_id).status == "suspended"
    token = token_of(run_id)
    assert sent == [f"/api/durable/callbacks/{token}/"]
    assert callbacks.read_token(key(), token) == ("cb-1", 1)
    assert checkpoints(run_id) == [
        (1, "callback", "approval", "pending"),
        (2, "local", "send", "completed"),
        (3, "callback_wait", "approval", "pending"),
    ]
    durable.complete_callback(token, {"by": "ada"})
    done = run_until_settled(run_id)
    # the token made again on replay is the one handed out on the first turn
    assert done.output == {"approved": {"by": "ada"}, "token": token}
    assert sent == [f"/api/durable/callbacks/{token}/"]  # the local step was not run again
    assert [status for *_, status in checkpoints(run_id)] == ["completed"] * 3
    assert not BufferedSignal.objects.filter(run_id=run_id).exists()  # consumed by the wait


@pytest.mark.django_db
def test_a_completion_before_the_wait_is_kept():
    with fake_clock() as clock:
        run_id = durable.start(cb_approval, {"sleep": "1h"})
        run_until_settled(run_id)  # sleeping, the handle already committed
        durable.complete_callback(token_of(run_id), "early")
        clock.advance("1h")
        assert run_until_settled(run_id).output["approved"] == "early"


@pytest.mark.django_db
def test_a_second_or_late_completion_is_refused_as_already_completed():
    run_id = durable.start(cb_approval, {})
    run_until_settled(run_id)
    token = token_of(run_id)
    durable.complete_callback(token, 1)
    with pytest.raises(durable.CallbackAlreadyCompleted, match="was already completed"):
        durable.complete_callback(token, 2)
    with pytest.raises(durable.CallbackAlreadyCompleted, match="was already completed"):
        durable.fail_callback(token, "nope")
    assert run_until_settled(run_id).output["approved"] == 1
    with pytest.raises(durable.CallbackAlreadyCompleted):
        durable.complete_callback(token, 3)


@pytest.mark.django_db
def test_a_callback_never_completed_times_out_and_a_completion_after_it_is_refused():
    with fake_clock() as clock:
        run_id = durable.start(cb_approval, {"timeout": "1h"})
        run_until_settled(run_id)
        clock.advance("59m")
        assert run_until_settled(run_id).status == "suspended"
        clock.advance("1m")
        # refused even before the run has woken up to notice
        with pytest.raises(durable.CallbackAlreadyCompleted, match="timed out"):
            durable.complete_callback(token_of(run_id), "late")
        done = run_until_settled(run_id)
    assert done.output == {"timed_out": 1}
    wait = Checkpoint.objects.get(run_id=run_id, seq=3)
    assert (wait.status, wait.error["code"], wait.error["type"]) == ("failed", "callback_timeout", "CallbackTimeout")


@pytest.mark.django_db
def test_a_completion_in_time_wins_over_the_timeout():
    with fake_clock() as clock:
        run_id = durable.start(cb_approval, {"timeout": "1h", "sleep": "2h"})
        run_until_settled(run_id)
        durable.complete_callback(token_of(run_id), "in time")
        clock.advance("2h")  # the wait comes after the deadline, but the completion came before it
        assert run_until_settled(run_id).output["approved"] == "in time"


@pytest.mark.django_db
def test_fail_callback_raises_callback_failed_in_the_wait():
    run_id = durable.start(cb_approval, {})
    run_until_settled(run_id)
    durable.fail_callback(token_of(run_id), ValueError("card declined"))
    error = run_until_settled(run_id).output["failed"]
    assert (error["message"], error["type"]) == ("card declined", "ValueError") and "traceback" not in error
    assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "failed"


@pytest.mark.django_db
def test_tokens_not_signed_here_or_for_no_callback_are_refused_and_nothing_is_written():
    run_id = durable.start(cb_approval, {})
    run_until_settled(run_id)
    token = token_of(run_id)
    body, signature = token.split(".")
    forged = f"{body}.{'A' * len(signature)}"
    for bad in (forged, "garbage", "", f"{body}.", token + "x"):
        with pytest.raises(durable.InvalidCallbackToken):
            durable.complete_callback(bad, 1)
    with pytest.raises(durable.CallbackNotFound, match="no such run"):
        durable.complete_callback(callbacks.make_token(key(), "missing", 1), 1)
    with pytest.raises(durable.CallbackNotFound, match="no callback at that position"):
        durable.complete_callback(callbacks.make_token(key(), run_id, 2), 1)
    with pytest.raises(durable.InvalidInput):
        durable.complete_callback(token, object())
    with pytest.raises(durable.InvalidInput):
        durable.fail_callback(token, 42)
    assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "pending"
    assert not BufferedSignal.objects.filter(run_id=run_id).exists()


@pytest.mark.django_db
def test_a_completion_after_the_run_ended_is_too_late():
    run = run_until_settled(durable.start(cb_unwaited))
    with pytest.raises(durable.CallbackAlreadyCompleted, match="the run has ended"):
        durable.complete_callback(run.output, 1)


@pytest.mark.django_db
def test_a_changed_callback_name_under_a_waiting_run_is_non_determinism():
    run_id = durable.start(cb_approval, {})
    run_until_settled(run_id)
    behaviour["name"] = "renamed"
    durable.complete_callback(token_of(run_id), 1)
    run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["code"] == "non_determinism"
    assert "'renamed'" in run.error["message"] and "'approval'" in run.error["message"]


@pytest.mark.django_db
def test_the_callback_key_comes_from_secret_key_or_the_setting(settings):
    from durable import conf

    derived = conf.parse({}).callback_secret
    assert derived and settings.SECRET_KEY.encode() not in derived
    assert conf.parse({"CALLBACK_SECRET": "s3cret"}).callback_secret == b"s3cret"
    assert conf.parse({"CALLBACK_URL": "https://x.test/cb/{token}/"}).callback_url == "https://x.test/cb/{token}/"
    for bad in ({"CALLBACK_SECRET": ""}, {"CALLBACK_URL": "https://x.test/cb/"}):
        with pytest.raises(Exception, match="CALLBACK_"):
            conf.parse(bad)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_completions_of_one_callback_write_exactly_one():
    run_id = durable.start(cb_approval, {}, run_id="cb-race")
    run_until_settled(run_id)
    token = token_of(run_id)

    def complete(i: int) -> str:
        try:
            durable.complete_callback(token, i)
            return "ok"
        except durable.CallbackAlreadyCompleted:
            return "refused"

    results = concurrently(4, complete)
    assert sorted(results) == ["ok", "refused", "refused", "refused"]
    assert BufferedSignal.objects.filter(run_id=run_id).count() == 1
    assert run_until_settled(run_id).output["approved"] in range(4)


# -- breakpoints ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_breakpoint_pauses_the_run_until_resumed():
    with fake_clock() as clock:
        run_id = durable.start(bp_review, {})
        run = run_until_settled(run_id)
        assert run.status == "suspended" and sent == ["prepare"]
        assert checkpoints(run_id)[-1] == (2, "breakpoint", "before charge", "pending")
        clock.advance("1h")  # the reconcile wakes replay it: it stays paused
        assert run_until_settled(run_id).status == "suspended" and sent == ["prepare"]
        assert durable.resume_breakpoint(run_id) == "before charge"
        assert run_until_settled(run_id).status == "suspended"  # at the next breakpoint
        assert sent == ["prepare", "charge"]
        assert checkpoints(run_id)[-1] == (4, "breakpoint", "after charge", "pending")
        assert durable.resume_breakpoint(run_id) == "after charge"
        assert run_until_settled(run_id).output == 1
    assert sent == ["prepare", "charge"]


@pytest.mark.django_db
def test_resume_breakpoint_on_a_run_not_paused_there_is_refused():
    with pytest.raises(durable.RunNotFound):
        durable.resume_breakpoint("missing")
    waiting = durable.start(cb_approval, {})
    run_until_settled(waiting)
    with pytest.raises(durable.BreakpointNotFound, match="not paused at a breakpoint"):
        durable.resume_breakpoint(waiting)
    run_id = durable.start(bp_review, {})
    with pytest.raises(durable.BreakpointNotFound):
        durable.resume_breakpoint(run_id)  # not there yet
    run_until_settled(run_id)
    durable.resume_breakpoint(run_id)
    with pytest.raises(durable.BreakpointNotFound):
        durable.resume_breakpoint(run_id)  # already resumed, not yet at the next one
    Run.objects.filter(id=run_id).update(status="cancelled")
    with pytest.raises(durable.BreakpointNotFound):
        durable.resume_breakpoint(run_id)


@pytest.mark.django_db
def test_a_changed_breakpoint_label_is_non_determinism():
    run_id = durable.start(bp_review, {})
    run_until_settled(run_id)
    durable.resume_breakpoint(run_id)
    behaviour["label"] = "moved"
    run = run_until_settled(run_id)
    assert run.status == "failed" and run.error["code"] == "non_determinism"
    assert "breakpoint 'moved'" in run.error["message"]


@durable.workflow(name="cb_instant")
def cb_instant(ctx):
    cb = ctx.wait_for_callback("instant")
    # A third party that answers at once, before any step of this turn runs (here: the workflow
    # itself; on replay the completion is refused as already written).
    try:
        durable.complete_callback(cb.token, "at once")
    except durable.CallbackAlreadyCompleted:
        pass
    return cb.wait()


@pytest.mark.django_db
def test_the_handle_exists_before_wait_for_callback_returns():
    assert run_until_settled(durable.start(cb_instant)).output == "at once"
