"""``durable_runs``: every filter, the table, JSON, and refusals of bad arguments (exit 2)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from durable.models import Run, RunStatus
from durable.testing import fake_clock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def runs(make_run):
    with fake_clock(T0) as clock:
        failed = make_run("failed", run_id="r-failed")
        clock.advance("1m")
        waiting = make_run("waiting", run_id="r-waiting", namespace="team-a")
        clock.advance("1m")
        done = make_run("completed", run_id="r-done", tags=["vip"])
    return failed, waiting, done


def _ids(result) -> list[str]:
    return [line.split()[0] for line in result.out.splitlines()[1:] if line and not line.startswith("(")]


def test_table_lists_newest_first_with_error_column(runs, run_cmd):
    result = run_cmd("durable_runs")
    assert result.code == 0
    header, *rows = result.out.splitlines()
    assert header.split() == ["ID", "STATUS", "WORKFLOW", "NAMESPACE", "CREATED", "ERROR"]
    assert _ids(result) == ["r-done", "r-waiting", "r-failed"]
    failed_row = next(r for r in rows if r.startswith("r-failed"))
    assert "step_failed: step 'charge' (#1) failed" in failed_row
    assert "2026-03-01 12:00:00 UTC" in failed_row


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "failed"], ["r-failed"]),
        (["--status", "failed,completed"], ["r-done", "r-failed"]),
        (["--status", "failed", "--status", "suspended"], ["r-waiting", "r-failed"]),
        (["--workflow", "dash_wait"], ["r-waiting"]),
        (["--namespace", "team-a"], ["r-waiting"]),
        (["--tag", "vip"], ["r-done"]),
        (["--workflow", "dash_fail", "--status", "completed"], ["r-done"]),
        (["--since", "2026-03-01T12:01:00+00:00"], ["r-done", "r-waiting"]),
        (["--workflow", "nobody"], []),
    ],
)
def test_filters(runs, run_cmd, args, expected):
    result = run_cmd("durable_runs", *args)
    assert result.code == 0
    assert _ids(result) == expected
    if not expected:
        assert result.out.strip() == "no runs match"


def test_since_relative_counts_back_from_the_engine_clock(runs, run_cmd):
    with fake_clock(T0 + timedelta(minutes=2, seconds=30)):
        assert _ids(run_cmd("durable_runs", "--since", "1m")) == ["r-done"]
        assert _ids(run_cmd("durable_runs", "--since", "2h")) == ["r-done", "r-waiting", "r-failed"]


def test_stale_running_past_lease_and_suspended_past_wake(make_run, run_cmd):
    with fake_clock(T0) as clock:
        make_run("sleeping", run_id="r-sleeping")  # wakes in 1h
        make_run("waiting", run_id="r-signal")  # its reconcile fallback wakes it after 5m
        clock.advance("1s")
        lost = make_run("pending", run_id="r-lost")
        lease_end = clock.now() + timedelta(seconds=30)
        Run.objects.filter(id=lost).update(status=RunStatus.RUNNING, locked_by="w", locked_until=lease_end)
        assert _ids(run_cmd("durable_runs", "--stale")) == []
        clock.advance("31s")
        assert _ids(run_cmd("durable_runs", "--stale")) == ["r-lost"]
        clock.advance("5m")
        assert _ids(run_cmd("durable_runs", "--stale")) == ["r-lost", "r-signal"]
        clock.advance("1h")
        assert _ids(run_cmd("durable_runs", "--stale")) == ["r-lost", "r-sleeping", "r-signal"]
        assert _ids(run_cmd("durable_runs", "--stale", "--status", "running")) == ["r-lost"]


def test_limit_says_more_match(runs, run_cmd):
    result = run_cmd("durable_runs", "--limit", "2")
    assert _ids(result) == ["r-done", "r-waiting"]
    assert "more match" in result.out.splitlines()[-1]


def test_json_lists_every_field(runs, run_cmd):
    result = run_cmd("durable_runs", "--json", "--status", "failed")
    (run,) = json.loads(result.out)
    assert run["id"] == "r-failed"
    assert run["error"]["code"] == "step_failed"
    assert run["input"] == {"n": 1}
    assert run["created_at"] == "2026-03-01T12:00:00+00:00"
    assert json.loads(run_cmd("durable_runs", "--json", "--workflow", "nobody").out) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--status", "sleepy"], "unknown status 'sleepy'"),
        (["--limit", "0"], "--limit must be between 1 and 1000"),
        (["--limit", "many"], "--limit must be a whole number"),
        (["--since", "yesterday"], "--since takes an ISO 8601 date-time"),
        (["--since", "2026-03-01T12:00:00"], "--since needs a timezone"),
        (["--workflow", ""], "--workflow must not be empty"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_arguments_exit_2(db, run_cmd, args, message):
    result = run_cmd("durable_runs", *args)
    assert result.code == 2
    assert message in result.error
