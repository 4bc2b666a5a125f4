"""durable.fork: a new run that keeps a finished run's history before a position (in-process, any database)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import durable
from durable.models import Checkpoint, Run
from durable.runtime import registry
from durable.testing import fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

calls: Counter[str] = Counter()
behaviour: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    behaviour.clear()


@durable.step(name="fork.charge")
def charge(amount: int) -> dict[str, Any]:
    calls["charge"] += 1
    if behaviour.get("charge_fails"):
        raise durable.FatalError("card declined")
    return {"charged": amount}


@durable.workflow(name="fork_checkout")
def fork_checkout(ctx, data):
    ctx.local_step("reserve", lambda: calls.update(["reserve"]) or data["amount"])
    charged = ctx.step(charge, data["amount"])
    ctx.local_step("confirm", lambda: calls.update(["confirm"]))
    return charged


@durable.workflow(name="fork_branch")
def fork_branch(ctx, data):
    if data.get("express"):
        ctx.local_step("express", lambda: calls.update(["express"]))
    ctx.local_step("pack", lambda: calls.update(["pack"]))
    ctx.sleep("1h")
    ctx.local_step("ship", lambda: calls.update(["ship"]))
    return data


def history(run_id: str) -> list[tuple[int, str, str]]:
    return list(Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "name", "status"))


def test_fork_of_a_failed_run_keeps_the_steps_before_and_reruns_the_failed_one():
    behaviour["charge_fails"] = True
    run = run_until_settled(durable.start(fork_checkout, {"amount": 5}, tags=["t"], namespace="shop"))
    assert run.status == "failed" and calls["charge"] == 1
    before = history(run.id)
    behaviour.clear()

    new_id = durable.fork(run.id, 2)

    assert new_id.startswith(f"{run.id}~fork~")
    new = durable.get_run(new_id)
    assert (new.forked_from, new.forked_at_seq, new.status) == (run.id, 2, "pending")
    assert (new.namespace, new.tags, new.input) == ("shop", ["t"], {"amount": 5})
    assert history(new_id) == [(1, "reserve", "completed")]
    done = run_until_settled(new_id)
    assert (done.status, done.output) == ("completed", {"charged": 5})
    # reserve replayed from the copy (ran once, for the original); charge ran again; confirm once
    assert (calls["reserve"], calls["charge"], calls["confirm"]) == (1, 2, 1)
    # the original is untouched
    assert durable.get_run(run.id).status == "failed" and history(run.id) == before
    assert durable.get_run(run.id).forked_from is None


def test_fork_of_a_completed_run_from_a_middle_position_executes_from_there():
    run = run_until_settled(durable.start(fork_checkout, {"amount": 3}))
    assert run.status == "completed"
    done = run_until_settled(durable.fork(run.id, 3))
    assert done.output == {"charged": 3}
    assert (calls["reserve"], calls["charge"], calls["confirm"]) == (1, 1, 2)


def test_fork_at_one_keeps_nothing_and_one_past_the_end_keeps_everything():
    run = run_until_settled(durable.start(fork_checkout, {"amount": 3}))
    whole = durable.fork(run.id, 4)
    assert [seq for seq, _, _ in history(whole)] == [1, 2, 3]
    assert run_until_settled(whole).output == {"charged": 3}
    assert calls == Counter(reserve=1, charge=1, confirm=1)  # nothing ran again
    fresh = durable.fork(run.id, 1)
    assert history(fresh) == []
    assert run_until_settled(fresh).output == {"charged": 3}
    assert calls == Counter(reserve=2, charge=2, confirm=2)  # everything ran again


def test_fork_with_new_input_that_replays_uses_it_from_the_position_on():
    run = run_until_settled(durable.start(fork_checkout, {"amount": 3}))
    done = run_until_settled(durable.fork(run.id, 2, input={"amount": 8}))
    assert (done.input, done.output) == ({"amount": 8}, {"charged": 8})


def test_fork_with_input_that_changes_the_copied_positions_fails_with_non_determinism():
    with fake_clock() as clock:
        run_id = durable.start(fork_branch, {"express": False})
        run_until_settled(run_id)
        clock.advance("1h")
        assert run_until_settled(run_id).status == "completed"
        new = run_until_settled(durable.fork(run_id, 3, input={"express": True}))
    assert new.status == "failed"
    assert new.error["code"] == "non_determinism" and new.error["type"] == "NonDeterminismError"
    message = new.error["message"]
    assert "position 1" in message and "'express'" in message and "'pack'" in message
    assert f"fork of {run_id!r} at position 3" in message
    assert new.error["forked_from"] == {"run_id": run_id, "seq": 3}
    assert calls["express"] == 0


def test_a_fork_replays_its_copied_history_on_later_turns_too():
    with fake_clock() as clock:
        run_id = durable.start(fork_branch, {"express": False})
        run_until_settled(run_id)
        clock.advance("1h")
        run_until_settled(run_id)
        # from the sleep on: pack is kept, the sleep starts again in the fork
        new_id = durable.fork(run_id, 2)
        assert run_until_settled(new_id).status == "suspended"
        clock.advance("1h")
        assert run_until_settled(new_id).status == "completed"
    assert (calls["pack"], calls["ship"]) == (1, 2)
    assert [name for _, name, _ in history(new_id)] == ["pack", "sleep", "ship"]


def test_fork_takes_the_newest_version_of_the_workflow():
    @durable.workflow(name="fork_versioned", version=1)
    def v1(ctx):
        ctx.local_step("a", lambda: "a1")
        return "v1"

    try:
        run = run_until_settled(durable.start("fork_versioned"))

        @durable.workflow(name="fork_versioned", version=2)
        def v2(ctx):
            first = ctx.local_step("a", lambda: "a2")
            return f"v2 after {first}"

        done = run_until_settled(durable.fork(run.id, 2))
        assert (done.version, done.output) == (2, "v2 after a1")
        assert durable.get_run(run.id).version == 1
    finally:
        registry.remove("fork_versioned")


def test_fork_of_a_cancelled_run_executes_again_what_never_settled():
    run_id = durable.start(fork_checkout, {"amount": 2})
    run_until_settled(run_id, timeout=0)  # reserve done, the charge dispatched and pending
    Run.objects.filter(id=run_id).update(status="suspended")
    durable.cancel(run_id)
    assert history(run_id) == [(1, "reserve", "completed"), (2, "fork.charge", "pending")]
    new_id = durable.fork(run_id, 3)
    assert history(new_id) == [(1, "reserve", "completed")]
    assert run_until_settled(new_id).output == {"charged": 2}


@pytest.mark.parametrize("status", ["pending", "running", "suspended", "blocked"])
def test_fork_refuses_an_active_run_and_writes_nothing(status):
    run_id = durable.start(fork_checkout, {"amount": 1})
    Run.objects.filter(id=run_id).update(status=status)
    count = Run.objects.count()
    with pytest.raises(durable.InvalidRunState, match=f"is {status}; only a finished run"):
        durable.fork(run_id, 1)
    assert Run.objects.count() == count


@pytest.mark.parametrize("from_seq", [0, -1, 5, True, "2", 2.0, None])
def test_fork_refuses_a_bad_position_and_writes_nothing(from_seq):
    run = run_until_settled(durable.start(fork_checkout, {"amount": 1}))
    count = Run.objects.count()
    with pytest.raises(durable.InvalidInput, match="from_seq"):
        durable.fork(run.id, from_seq)
    assert Run.objects.count() == count


def test_fork_refuses_unknown_runs_bad_ids_bad_input_and_unknown_options():
    with pytest.raises(durable.RunNotFound):
        durable.fork("missing", 1)
    run = run_until_settled(durable.start(fork_checkout, {"amount": 1}))
    count = Run.objects.count()
    with pytest.raises(durable.InvalidInput):
        durable.fork(run.id, 1, run_id="has space")
    with pytest.raises(durable.InvalidInput):
        durable.fork(run.id, 1, input={"amount": object()})
    with pytest.raises(TypeError, match="namespace"):
        durable.fork(run.id, 1, namespace="x")
    assert Run.objects.count() == count


def test_fork_is_idempotent_on_its_new_run_id():
    run = run_until_settled(durable.start(fork_checkout, {"amount": 1}))
    assert durable.fork(run.id, 2, run_id="again") == "again"
    assert durable.fork(run.id, 2, run_id="again") == "again"
    assert Run.objects.filter(forked_from=run.id).count() == 1
    with pytest.raises(durable.InvalidInput, match="already taken"):
        durable.fork(run.id, 3, run_id="again")
    with pytest.raises(durable.InvalidInput, match="already taken"):
        durable.fork(run.id, 1, run_id=run.id)
