"""``durable_cancel`` and ``durable_requeue``: one run, or the runs the filters match (dry run, prompt, --yes)."""

from __future__ import annotations

import pytest

from durable.models import Run, RunStatus
from durable.testing import run_until_settled
from durable_dashboard.models import AuditEntry


def _status(run_id: str) -> str:
    return Run.objects.get(id=run_id).status


def test_cancel_one_with_a_reason(make_run, run_cmd):
    run_id = make_run("waiting")
    result = run_cmd("durable_cancel", run_id, "--reason", "customer asked")
    assert (result.code, result.out.strip()) == (0, f"{run_id}: cancelled")
    assert _status(run_id) == RunStatus.CANCELLED
    entry = AuditEntry.objects.get()
    assert (entry.via, entry.action, entry.reason, entry.run_ids, entry.ok) == (
        "cli",
        "cancel",
        "customer asked",
        [run_id],
        True,
    )


def test_cancel_compensate_and_an_ended_run(make_run, run_cmd):
    run_id = make_run("waiting")
    assert run_cmd("durable_cancel", run_id, "--compensate").code == 0
    assert AuditEntry.objects.get().action == "cancel_compensate"
    run_until_settled(run_id)
    assert _status(run_id) == RunStatus.CANCELLED
    again = run_cmd("durable_cancel", run_id)
    assert (again.code, "already ended" in again.out) == (0, True)


def test_cancel_unknown_run_exits_1(run_cmd):
    result = run_cmd("durable_cancel", "nope")
    assert (result.code, "no run with id 'nope'" in result.error) == (1, True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a run id, or choose runs with filters"),
        (["some-id", "--status", "running"], "give a run id or filters, not both"),
        (["--status", "zombie"], "unknown status 'zombie'"),
        (["--limit", "5000", "--status", "running"], "--limit must be between 1 and 1000"),
    ],
)
def test_cancel_bad_arguments_exit_2(run_cmd, args, message):
    result = run_cmd("durable_cancel", *args)
    assert (result.code, message in result.error) == (2, True), result
    assert not AuditEntry.objects.exists()


@pytest.fixture
def mixed(make_run):
    return {
        "w1": make_run("waiting", run_id="w1"),
        "w2": make_run("waiting", run_id="w2", namespace="team-a"),
        "f1": make_run("failed", run_id="f1"),
        "s1": make_run("sleeping", run_id="s1"),
    }


def test_bulk_dry_run_lists_and_changes_nothing(mixed, run_cmd):
    result = run_cmd("durable_cancel", "--workflow", "dash_wait", "--dry-run")
    assert result.code == 0
    assert "w1" in result.out and "w2" in result.out and "f1" not in result.out
    assert "dry run: would cancel 2 run(s)" in result.out
    assert _status("w1") == _status("w2") == RunStatus.SUSPENDED
    assert not AuditEntry.objects.exists()


def test_bulk_with_yes_acts_on_the_matches_only(mixed, run_cmd):
    result = run_cmd("durable_cancel", "--workflow", "dash_wait", "--namespace", "team-a", "--yes", "--reason", "x")
    assert result.code == 0
    assert (_status("w2"), _status("w1"), _status("s1")) == (
        RunStatus.CANCELLED,
        RunStatus.SUSPENDED,
        RunStatus.SUSPENDED,
    )
    entry = AuditEntry.objects.get()
    assert (entry.run_ids, entry.reason, entry.via) == (["w2"], "x", "cli")


def test_bulk_prompt_no_and_end_of_input_change_nothing(mixed, run_cmd):
    for answer in ("n\n", ""):
        result = run_cmd("durable_cancel", "--status", "suspended", stdin=answer)
        assert result.code == 1
        assert "Cancel 3 run(s)? [y/N]" in result.out
        assert "not confirmed; nothing changed" in result.error
    assert Run.objects.filter(status=RunStatus.CANCELLED).count() == 0


def test_bulk_prompt_yes(mixed, run_cmd):
    result = run_cmd("durable_cancel", "--status", "suspended", "--limit", "2", stdin="y\n")
    assert result.code == 0
    assert "more runs match" in result.out
    assert "cancel: 2 run(s) done" in result.out
    assert Run.objects.filter(status=RunStatus.CANCELLED).count() == 2


def test_bulk_with_no_match(mixed, run_cmd):
    result = run_cmd("durable_cancel", "--tag", "nobody", "--yes")
    assert (result.code, result.out.strip()) == (0, "no runs match")


def test_requeue_one_and_a_refusal(mixed, run_cmd):
    assert run_cmd("durable_requeue", "f1").code == 0
    assert _status("f1") == RunStatus.PENDING
    refused = run_cmd("durable_requeue", "w1")
    assert refused.code == 1
    assert run_cmd("durable_requeue", "nope").code == 1


def test_bulk_requeue_reports_refusals_with_exit_1(mixed, run_cmd):
    result = run_cmd("durable_requeue", "--workflow", "dash_fail", "--yes")
    assert (result.code, _status("f1")) == (0, RunStatus.PENDING)
    partly = run_cmd("durable_requeue", "--status", "pending,suspended", "--yes")
    assert partly.code == 1
    assert "4 of 4 run(s) refused" in partly.error
    assert "FAILED" in partly.out
