"""The REST API on schedules: permissions per action, audit entries, JSON errors, the whole lifecycle."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User

from durable.testing import fake_clock
from durable_dashboard.models import SCHEDULE_PERMISSIONS, AuditEntry
from tests import schedule_workflows as _registered  # noqa: F401

URL = "/api/durable/schedules/"
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def schedule_user(name: str, *actions: str, view: bool = True) -> User:
    user = User.objects.create_user(name, password="pw")
    perms = []
    if view:
        perms.append(Permission.objects.get(content_type__app_label="durable", codename="view_schedule"))
    for action in actions:
        codename = SCHEDULE_PERMISSIONS[action][0]
        perms.append(Permission.objects.get(content_type__app_label="durable_dashboard", codename=codename))
    user.user_permissions.add(*perms)
    return User.objects.get(pk=user.pk)


@pytest.fixture
def admin_api(api, db):
    return api(schedule_user("scheduler", *SCHEDULE_PERMISSIONS))


def test_schedule_lifecycle_through_the_api_is_audited(admin_api):
    with fake_clock(T0):
        created = admin_api.post(
            URL,
            {"key": "nightly", "workflow": "sched.window", "cron": "0 2 * * *", "timezone": "Europe/Lisbon"},
            format="json",
        )
        assert created.status_code == 201, created.content
        body = created.json()
        assert body["description"] == "every day at 02:00 (Europe/Lisbon)"
        assert body["upcoming"][:2] == ["2026-03-01T02:00:00+00:00", "2026-03-02T02:00:00+00:00"]
        assert admin_api.get(URL).json()[0]["key"] == "nightly"
        patched = admin_api.patch(URL + "nightly/", {"overlap": "skip"}, format="json")
        assert patched.status_code == 200 and patched.json()["overlap"] == "skip"
        assert admin_api.post(URL + "nightly/pause/").json()["paused"] is True
        assert admin_api.post(URL + "nightly/resume/").json()["paused"] is False
        triggered = admin_api.post(URL + "nightly/trigger/").json()["run_ids"]
        assert triggered[0].startswith("nightly@trigger-")
        filled = admin_api.post(
            URL + "nightly/backfill/",
            {"start": "2026-02-01T00:00:00+00:00", "end": "2026-02-03T23:00:00+00:00"},
            format="json",
        )
        assert filled.json()["run_ids"] == [f"nightly@2026020{d}T020000Z" for d in (1, 2, 3)]
        assert admin_api.delete(URL + "nightly/").status_code == 204
        assert admin_api.get(URL + "nightly/").status_code == 404
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "via", "ok"))
    assert [a for a, _, _ in actions] == [
        "create_schedule",
        "update_schedule",
        "pause_schedule",
        "resume_schedule",
        "trigger_schedule",
        "backfill_schedule",
        "delete_schedule",
    ]
    assert all(via == "api" and ok for _, via, ok in actions)
    assert AuditEntry.objects.get(action="trigger_schedule").run_ids == triggered


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"key": "x", "workflow": "sched.window", "cron": "99 * * * *"}, "invalid_input"),
        ({"key": "x", "workflow": "sched.window", "every": "1h", "timezone": "Nowhere/City"}, "invalid_input"),
        ({"key": "x", "workflow": "sched.window"}, "invalid_input"),
        ({"key": "x", "workflow": "no.such", "every": "1h"}, "workflow_not_found"),
        ({"key": "a@b", "workflow": "sched.window", "every": "1h"}, "invalid"),
    ],
)
def test_a_bad_spec_is_a_json_400(admin_api, body, code):
    answer = admin_api.post(URL, body, format="json")
    assert answer.status_code == 400 and answer["Content-Type"] == "application/json"
    assert answer.json()["code"] == code


def test_conflicts_and_unknown_keys_are_json(admin_api):
    body = {"key": "dup", "workflow": "sched.window", "every": "1h"}
    assert admin_api.post(URL, body, format="json").status_code == 201
    again = admin_api.post(URL, body, format="json")
    assert (again.status_code, again.json()["code"]) == (409, "schedule_exists")
    missing = admin_api.post(URL + "nope/pause/")
    assert (missing.status_code, missing.json()["code"]) == (404, "schedule_not_found")
    too_many = admin_api.post(
        URL + "dup/backfill/", {"start": "2026-01-01T00:00:00+00:00", "end": "2026-12-31T00:00:00+00:00"}, format="json"
    )
    assert too_many.status_code == 400 and "more than 1000 windows" in too_many.json()["detail"]


@pytest.mark.parametrize(
    ("action", "method", "path"),
    [
        ("create_schedule", "post", ""),
        ("update_schedule", "patch", "s/"),
        ("delete_schedule", "delete", "s/"),
        ("pause_schedule", "post", "s/pause/"),
        ("resume_schedule", "post", "s/resume/"),
        ("trigger_schedule", "post", "s/trigger/"),
        ("backfill_schedule", "post", "s/backfill/"),
    ],
)
def test_each_schedule_action_needs_its_own_permission(api, admin_api, action, method, path):
    admin_api.post(URL, {"key": "s", "workflow": "sched.window", "every": "1h"}, format="json")
    others = [a for a in SCHEDULE_PERMISSIONS if SCHEDULE_PERMISSIONS[a][0] != SCHEDULE_PERMISSIONS[action][0]]
    client = api(schedule_user("almost", *others))
    answer = getattr(client, method)(URL + path, {}, format="json")
    assert answer.status_code == 403, answer.content
    assert SCHEDULE_PERMISSIONS[action][0] in answer.json()["detail"]


def test_seeing_schedules_needs_view_schedule(api, db):
    assert api(schedule_user("blind", view=False)).get(URL).status_code == 403
    assert api(None).get(URL).status_code in (401, 403)
    assert api(schedule_user("viewer")).get(URL).status_code == 200
