"""``manage.py durable_prune``: the report, --dry-run, --older-than, --status, --json, bad input, a failing archive."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from durable.models import Checkpoint, Run
from durable.testing import fake_clock

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def finished(run_id: str, status: str, days_ago: float, checkpoints: int = 2, **extra) -> None:
    when = NOW - timedelta(days=days_ago)
    Run.objects.create(id=run_id, workflow="w", status=status, created_at=when, finished_at=when, **extra)
    for seq in range(checkpoints):
        Checkpoint.objects.create(run_id=run_id, seq=seq, name="s", kind="local", status="completed")


@pytest.fixture
def runs(db):
    finished("c-old", "completed", 40)
    finished("c-new", "completed", 10)
    finished("f-old", "failed", 100)
    finished("f-mid", "failed", 40)
    finished("d-old", "dead", 400)
    Run.objects.create(id="parent", workflow="w", status="suspended")
    finished("child", "completed", 40, parent_id="parent")


def test_dry_run_counts_per_status_and_deletes_nothing(runs, run_cmd):
    with fake_clock(NOW):
        done = run_cmd("durable_prune", "--dry-run")
    assert done.code == 0
    assert done.out.strip() == ("would delete 2 run(s) (completed 1, failed 1); kept 1 that an active run still needs")
    assert Run.objects.count() == 7


def test_prunes_by_the_configured_ages_and_reports_it(runs, run_cmd):
    with fake_clock(NOW):
        done = run_cmd("durable_prune", "--json")
    report = json.loads(done.out)
    assert report["runs"] == {"completed": 1, "failed": 1} and report["total"] == 2 and report["kept"] == 1
    assert report["rows"]["durable_checkpoint"] == 4 and report["rows"]["durable_run"] == 2
    assert sorted(Run.objects.values_list("id", flat=True)) == ["c-new", "child", "d-old", "f-mid", "parent"]
    assert not Checkpoint.objects.filter(run_id__in=["c-old", "f-old"]).exists()


def test_older_than_and_status_choose_what_goes(runs, run_cmd):
    with fake_clock(NOW):
        done = run_cmd("durable_prune", "--status", "failed,dead", "--older-than", "30d")
    assert done.code == 0 and done.out.startswith("deleted 3 run(s) (dead 1, failed 2) in 2 batch(es)")
    assert sorted(Run.objects.values_list("id", flat=True)) == ["c-new", "c-old", "child", "parent"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--status", "running"], "--status must be one of completed, failed, cancelled, dead"),
        (["--older-than", "soon"], "--older-than: invalid duration 'soon'"),
        (["--older-than", "0s"], "--older-than must be a positive age"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(runs, run_cmd, args, message):
    done = run_cmd("durable_prune", *args)
    assert done.code == 2 and message in done.error
    assert Run.objects.count() == 7


def failing_archive(runs):
    raise OSError("bucket unreachable")


def test_a_failing_archive_keeps_the_batch_and_exits_1(runs, run_cmd):
    with override_settings(DURABLE={"TRANSPORT": "manual", "RETENTION_ARCHIVE": f"{__name__}.failing_archive"}):
        with fake_clock(NOW):
            done = run_cmd("durable_prune")
    assert done.code == 1 and "the archive hook failed, that batch was kept: OSError: bucket unreachable" in done.error
    assert done.out.startswith("deleted 0 run(s)")
    assert Run.objects.count() == 7
