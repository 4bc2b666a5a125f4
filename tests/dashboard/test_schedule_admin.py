"""The schedules admin page: the list, forms with validation, actions with their permissions and audit entries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

import durable
from durable.testing import fake_clock
from durable_dashboard.models import SCHEDULE_PERMISSIONS, AuditEntry
from tests import schedule_workflows as _registered  # noqa: F401
from tests.dashboard.test_schedule_api import schedule_user

LIST = reverse("admin:durable_schedule_changelist")
ADD = reverse("admin:durable_schedule_add")
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def change(key: str) -> str:
    return reverse("admin:durable_schedule_change", args=[quote(key)])


def form_data(**extra: object) -> dict[str, object]:
    data: dict[str, object] = {
        "key": "nightly",
        "workflow": "sched.window",
        "every": "",
        "cron": "0 2 * * *",
        "timezone": "Europe/Lisbon",
        "input": "",
        "overlap": "allow",
        "jitter": "",
        "catch_up": "1",
        "start_at": "",
        "end_at": "",
    }
    data.update(extra)
    return data


@pytest.fixture
def scheduler_client(client, db):
    user = schedule_user("scheduler", *SCHEDULE_PERMISSIONS)
    user.is_staff = True
    user.save()
    client.force_login(user)
    return client


def test_list_shows_words_timezone_next_five_windows_last_run_and_paused(scheduler_client):
    with fake_clock(T0):
        durable.create_schedule("nightly", "sched.window", cron="0 2 * * *", timezone="Europe/Lisbon")
        run_id = durable.trigger_schedule("nightly")
        page = scheduler_client.get(LIST).content.decode()
    assert "every day at 02:00 (Europe/Lisbon)" in page
    assert page.count("2026-03-0") >= 5 and "2026-03-05 02:00" in page
    assert run_id in page and "pending" in page
    assert "Backfill…" in page


def test_create_form_validates_cron_and_timezone_as_form_errors(scheduler_client):
    bad_cron = scheduler_client.post(ADD, form_data(cron="99 * * * *"))
    assert bad_cron.status_code == 200 and "invalid cron expression" in bad_cron.content.decode()
    bad_zone = scheduler_client.post(ADD, form_data(timezone="Nowhere/City"))
    assert bad_zone.status_code == 200 and "unknown timezone" in bad_zone.content.decode()
    assert durable.list_schedules() == []
    created = scheduler_client.post(ADD, form_data())
    assert created.status_code == 302
    assert durable.get_schedule("nightly").schedule.cron == "0 2 * * *"
    edited = scheduler_client.post(change("nightly"), form_data(cron="", every="15m"))
    assert edited.status_code == 302, edited.content.decode()[:2000]
    assert durable.get_schedule("nightly").schedule.every == 900
    assert list(AuditEntry.objects.order_by("id").values_list("action", "via")) == [
        ("create_schedule", "admin"),
        ("update_schedule", "admin"),
    ]


def test_pause_resume_trigger_and_backfill_actions_are_audited(scheduler_client):
    with fake_clock(T0):
        durable.create_schedule("s", "sched.window", every="1h")
        for action in ("pause_selected", "resume_selected", "trigger_selected"):
            answer = scheduler_client.post(LIST, {"action": action, "_selected_action": ["s"]})
            assert answer.status_code == 302
        backfill = reverse("admin:durable_schedule_backfill", args=["s"])
        assert scheduler_client.get(backfill).status_code == 200
        bad = scheduler_client.post(backfill, {"start": "2026-01-01 00:00", "end": "2026-03-01 00:00"})
        assert "more than 1000 windows" in bad.content.decode()
        done = scheduler_client.post(backfill, {"start": "2026-02-01 00:00", "end": "2026-02-01 02:00"})
        assert done.status_code == 302
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "ok"))
    assert actions == [
        ("pause_schedule", True),
        ("resume_schedule", True),
        ("trigger_schedule", True),
        ("backfill_schedule", False),
        ("backfill_schedule", True),
    ]
    assert AuditEntry.objects.filter(action="backfill_schedule", ok=True).get().run_ids == [
        "s@20260201T000000Z",
        "s@20260201T010000Z",
        "s@20260201T020000Z",
    ]


def test_actions_and_pages_follow_their_own_permissions(client, db):
    durable.create_schedule("s", "sched.window", every="1h")
    viewer = schedule_user("viewer")
    viewer.is_staff = True
    viewer.save()
    client.force_login(viewer)
    page = client.get(LIST).content.decode()
    assert "pause_selected" not in page and "trigger_selected" not in page
    assert client.get(ADD).status_code == 403
    assert client.get(reverse("admin:durable_schedule_backfill", args=["s"])).status_code == 403
    pauser = schedule_user("pauser", "pause_schedule")
    pauser.is_staff = True
    pauser.save()
    client.force_login(pauser)
    page = client.get(LIST).content.decode()
    assert "pause_selected" in page and "trigger_selected" not in page
