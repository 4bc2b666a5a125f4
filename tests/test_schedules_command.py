"""``manage.py durable_schedules``: the list in words and as JSON, and a clear error on bad arguments."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import durable
from durable.testing import fake_clock
from tests import schedule_workflows as _registered  # noqa: F401

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def run(*args: str) -> str:
    out = StringIO()
    call_command("durable_schedules", *args, stdout=out)
    return out.getvalue()


def test_lists_schedules_with_their_next_fire_times():
    assert run() == "no schedules\n"
    with fake_clock(T0):
        durable.create_schedule("nightly", "sched.window", cron="0 2 * * *", timezone="Europe/Lisbon")
        durable.create_schedule("quarter", "sched.window", every="15m")
        durable.pause_schedule("quarter")
        text = run("--next", "3")
        rows = json.loads(run("--json"))
    assert "nightly  sched.window  every day at 02:00 (Europe/Lisbon)  [active, runtime]" in text
    assert "    2026-03-03T02:00:00+00:00" in text and "2026-03-04" not in text
    assert "quarter  sched.window  every 15 minutes  [paused, runtime]" in text
    assert [r["key"] for r in rows] == ["nightly", "quarter"]
    assert rows[0]["upcoming"][4] == "2026-03-05T02:00:00+00:00"
    assert rows[1]["paused"] is True


def test_bad_arguments_fail_with_a_message():
    with pytest.raises(CommandError, match="--next must be from 1 to 100"):
        run("--next", "0")
