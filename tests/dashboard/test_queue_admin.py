"""The queues admin page: each queue's limits and figures, the limits form, pause/resume, permissions, audit."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings
from django.urls import reverse

import durable
from durable.testing import drive
from durable_dashboard.models import AuditEntry
from tests.dashboard.test_queue_api import queue_user
from tests.test_queues import SETTINGS, q_fan

LIST = reverse("admin:durable_queue_changelist")


def limits_url(name: str) -> str:
    return reverse("admin:durable_queue_change", args=[name])


def login(*codenames: str) -> Client:
    user = queue_user("ops-" + "-".join(codenames), *codenames)
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def _queues(db):
    with override_settings(DURABLE=SETTINGS):
        yield


def test_the_page_shows_each_queue_with_limits_running_waiting_and_admissions():
    durable.start(q_fan, 3)
    drive()
    page = login("view_queue").get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    for name in ("q_keyed", "q_lim", "q_paused"):
        assert f'data-queue="{name}"' in html
    row = html[html.index('data-queue="q_lim"') :].split("</tr>")[0]
    assert '<td class="durable-limit-concurrency">2</td>' in row
    assert '<td class="durable-running">2</td>' in row and '<td class="durable-waiting">1</td>' in row
    assert '<td class="durable-admitted">2</td>' in row
    assert "Pause" not in row  # seeing is not changing


def test_limits_are_changed_in_the_form_and_audited_and_a_bad_one_is_shown():
    client = login("view_queue", "change_queue")
    saved = client.post(limits_url("q_lim"), {"concurrency": "5", "rate": "off", "key_concurrency": ""})
    assert saved.status_code == 302
    info = durable.get_queue("q_lim")
    assert info.overrides == {"concurrency": 5, "rate": None} and info.limits["concurrency"] == 5
    bad = client.post(limits_url("q_lim"), {"concurrency": "lots", "rate": "", "key_concurrency": ""})
    assert bad.status_code == 200 and "concurrency must be a positive integer" in bad.content.decode()
    assert durable.get_queue("q_lim").overrides == {"concurrency": 5, "rate": None}
    page = client.get(LIST).content.decode()
    assert "(override)" in page
    assert list(AuditEntry.objects.order_by("id").values_list("action", "via", "ok")) == [
        ("configure_queue", "admin", True),
        ("configure_queue", "admin", False),
    ]


def test_pause_and_resume_from_the_page_and_only_with_change_queue():
    viewer = login("view_queue")
    assert viewer.post(LIST, {"queue": "q_lim", "do": "pause"}).status_code == 403
    assert viewer.post(limits_url("q_lim"), {"concurrency": "1"}).status_code == 403
    client = login("view_queue", "change_queue")
    client.post(LIST, {"queue": "q_lim", "do": "pause"})
    assert durable.get_queue("q_lim").paused is True
    assert "<strong>paused</strong>" in client.get(LIST).content.decode()
    client.post(LIST, {"queue": "q_lim", "do": "resume"})
    assert durable.get_queue("q_lim").paused is False
    assert [a for (a,) in AuditEntry.objects.order_by("id").values_list("action")] == ["pause_queue", "resume_queue"]


def test_without_view_queue_the_page_is_closed_and_an_unknown_queue_is_404():
    assert login().get(LIST).status_code in (302, 403)
    assert login("view_queue").get(limits_url("nope")).status_code == 404
