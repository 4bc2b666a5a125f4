"""The REST API on limited queues: list, detail, change limits, pause/resume; permissions, audit, JSON errors."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings

import durable
from durable.models import Checkpoint
from durable_dashboard.models import AuditEntry
from tests.test_queues import SETTINGS, q_fan

URL = "/api/durable/queues/"


def queue_user(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password="pw")
    perms = Permission.objects.filter(content_type__app_label="durable", codename__in=codenames)
    user.user_permissions.add(*perms)
    return User.objects.get(pk=user.pk)


@pytest.fixture(autouse=True)
def _queues(db):
    with override_settings(DURABLE=SETTINGS):
        yield


@pytest.fixture
def operator_api(api):
    return api(queue_user("ops", "view_queue", "change_queue"))


def test_queues_are_listed_with_their_limits_and_figures(operator_api):
    run_id = durable.start(q_fan, 3)
    from durable.testing import drive

    drive()
    body = operator_api.get(URL).json()
    assert [q["name"] for q in body] == ["q_keyed", "q_lim", "q_paused"]
    lim = operator_api.get(URL + "q_lim/").json()
    assert (lim["concurrency"], lim["rate"], lim["key_concurrency"]) == (2, None, None)
    assert lim["settings"] == {"concurrency": 2, "rate": None, "key_concurrency": None}
    assert (lim["running"], lim["waiting"], lim["admitted_last_minute"], lim["paused"]) == (2, 1, 2, False)
    assert lim["oldest_waiting"] is not None
    assert Checkpoint.objects.filter(run_id=run_id).count() == 3


def test_a_limit_changed_through_the_api_is_audited_and_admits_at_once(operator_api):
    run_id = durable.start(q_fan, 4)
    from durable.testing import drive

    drive()
    assert Checkpoint.objects.filter(run_id=run_id, admission="admitted").count() == 2
    patched = operator_api.patch(URL + "q_lim/", {"concurrency": 4}, format="json")
    assert patched.status_code == 200, patched.content
    body = patched.json()
    assert (body["concurrency"], body["overrides"], body["settings"]["concurrency"]) == (4, {"concurrency": 4}, 2)
    # The change admitted the waiting steps itself, no sweep in between.
    assert Checkpoint.objects.filter(run_id=run_id, admission="admitted").count() == 4
    assert operator_api.patch(URL + "q_lim/", {"rate": "5/s"}, format="json").json()["overrides"] == {
        "concurrency": 4,
        "rate": "5/s",
    }
    reset = operator_api.patch(URL + "q_lim/", {"reset": True}, format="json").json()
    assert (reset["overrides"], reset["concurrency"]) == ({}, 2)
    assert operator_api.post(URL + "q_lim/pause/").json()["paused"] is True
    assert operator_api.post(URL + "q_lim/resume/").json()["paused"] is False
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "via", "ok", "params"))
    assert [(a, via, ok) for a, via, ok, _ in entries] == [
        ("configure_queue", "api", True),
        ("configure_queue", "api", True),
        ("configure_queue", "api", True),
        ("pause_queue", "api", True),
        ("resume_queue", "api", True),
    ]
    assert entries[0][3] == {"queue": "q_lim", "concurrency": 4}


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"concurrency": 0}, 400, "concurrency must be a positive integer"),
        ({"rate": "fast"}, 400, "rate must be a string like"),
        ({"burst": 2}, 400, "unknown field(s) ['burst']"),
        ([1], 400, "must be a JSON object"),
    ],
)
def test_a_bad_change_is_a_json_400_and_writes_nothing(operator_api, body, status, needle):
    response = operator_api.patch(URL + "q_lim/", body, format="json")
    assert response.status_code == status and needle in response.json()["detail"]
    assert operator_api.get(URL + "q_lim/").json()["overrides"] == {}


def test_an_unknown_queue_is_a_json_404(operator_api):
    for response in (
        operator_api.get(URL + "nope/"),
        operator_api.patch(URL + "nope/", {"concurrency": 1}, format="json"),
        operator_api.post(URL + "nope/pause/"),
    ):
        assert response.status_code == 404 and response.json()["code"] == "queue_not_found"


def test_seeing_needs_view_queue_and_changing_needs_change_queue(api):
    assert api(queue_user("nobody")).get(URL).status_code == 403
    viewer = api(queue_user("viewer", "view_queue"))
    assert viewer.get(URL).status_code == 200
    denied = viewer.post(URL + "q_lim/pause/")
    assert denied.status_code == 403 and "durable.change_queue" in denied.json()["detail"]
    assert viewer.patch(URL + "q_lim/", {"concurrency": 9}, format="json").status_code == 403
    assert not AuditEntry.objects.exists()
    assert api(None).get(URL).status_code in (401, 403)


def test_a_waiting_step_says_why_in_the_run_detail(api):
    from durable.testing import drive

    user = queue_user("reader", "view_run")
    run_id = durable.start(q_fan, 3)
    drive()
    body = api(user).get(f"/api/durable/runs/{run_id}/").json()
    steps = {cp["seq"]: cp for cp in body["checkpoints"]}
    waiting = [cp for cp in steps.values() if cp["admission"] == "waiting"]
    assert len(waiting) == 1 and waiting[0]["status"] == "pending"
    assert waiting[0]["wait_reason"] == "queue 'q_lim' is at its concurrency limit (2 of 2 running)"
    assert sorted(cp["wait_reason"] is None for cp in steps.values()) == [False, True, True]
