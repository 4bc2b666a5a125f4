"""Fork in the dashboard: "rerun from here" on the timeline, the superseded filter, the API endpoint."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

import durable
from durable.models import Run
from durable.testing import run_until_settled
from durable_dashboard.models import AuditEntry

pytestmark = pytest.mark.django_db

LIST = "/admin/durable/run/"
BASE = "/api/durable"


def detail(run_id: str) -> str:
    return reverse("admin:durable_run_change", args=[quote(run_id)])


def fork_url(run_id: str, seq: int | None = None) -> str:
    url = reverse("admin:durable_run_act", args=[quote(run_id), "fork"])
    return f"{url}?from_seq={seq}" if seq is not None else url


def post_json(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


# -- admin ---------------------------------------------------------------------------------


def test_each_timeline_row_of_a_finished_run_offers_rerun_from_here(admin_client, make_run):
    failed = make_run("failed")
    page = admin_client.get(detail(failed)).content.decode()
    assert f'href="{fork_url(failed, 1)}"' in page and "rerun from here" in page
    waiting = make_run("waiting")
    assert "rerun from here" not in admin_client.get(detail(waiting)).content.decode()  # active: no fork


def test_rerun_from_here_needs_the_fork_permission(staff_client, make_user, make_run):
    failed = make_run("failed")
    others = make_user("others", "retry", "requeue")
    client = staff_client(others)
    assert "rerun from here" not in client.get(detail(failed)).content.decode()
    assert client.get(fork_url(failed, 1)).status_code == 403
    assert client.post(fork_url(failed), {"from_seq": 1}).status_code == 403
    assert not Run.objects.filter(forked_from=failed).exists() and not AuditEntry.objects.exists()


def test_rerun_from_here_confirms_then_forks_and_audits(admin_client, make_run):
    failed = make_run("failed")
    confirm = admin_client.get(fork_url(failed, 1))
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert 'name="from_seq"' in page and 'value="1"' in page and "&quot;n&quot;: 1" in page
    assert not Run.objects.filter(forked_from=failed).exists() and not AuditEntry.objects.exists()
    response = admin_client.post(fork_url(failed), {"from_seq": 1, "input": '{"ok": true}', "reason": "card fixed"})
    new = Run.objects.get(forked_from=failed)
    assert response.status_code == 302 and response["Location"] == detail(new.id)
    assert (new.forked_at_seq, new.input) == (1, {"ok": True})
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.reason, entry.ok, entry.run_ids) == (
        "fork",
        "admin",
        "card fixed",
        True,
        [failed],
    )
    assert run_until_settled(new.id).output == "fixed"
    assert failed in admin_client.get(detail(new.id)).content.decode()  # lineage: forked from
    assert new.id in admin_client.get(detail(failed)).content.decode()  # lineage: forked as


def test_rerun_from_a_bad_position_shows_the_error_and_writes_no_run(admin_client, make_run):
    failed = make_run("failed")
    response = admin_client.post(fork_url(failed), {"from_seq": 9}, follow=True)
    assert any("from_seq must be between 1 and 2" in str(m) for m in response.context["messages"])
    assert not Run.objects.filter(forked_from=failed).exists()
    assert AuditEntry.objects.get().ok is False
    form = admin_client.post(fork_url(failed), {"from_seq": "x"}, follow=True)
    assert any("from_seq" in str(m) for m in form.context["messages"])


def test_the_superseded_filter_hides_runs_retried_or_forked(admin_client, make_run):
    forked, retried, plain = make_run("failed"), make_run("failed"), make_run("failed")
    fork_id = durable.fork(forked, 1)
    retry_id = durable.retry_with_input(retried, {"ok": True})

    def listed(query: str) -> set[str]:
        return {run.id for run in admin_client.get(LIST + query).context["cl"].result_list}

    assert {forked, retried, plain, fork_id, retry_id} <= listed("")
    hidden = listed("?superseded=hide")
    assert plain in hidden and fork_id in hidden and retry_id in hidden
    assert forked not in hidden and retried not in hidden
    assert listed("?superseded=only") == {forked, retried}


# -- API -----------------------------------------------------------------------------------


def test_api_fork_starts_the_new_run_and_audits_it(api, operator, make_run):
    failed = make_run("failed")
    client = api(operator)
    response = post_json(client, f"{BASE}/runs/{failed}/fork/", {"from_seq": 1, "input": {"ok": True}, "reason": "r"})
    assert response.status_code == 200, response.content
    new_id = response.json()["result"]["new_run_id"]
    data = client.get(f"{BASE}/runs/{new_id}/").json()
    assert (data["forked_from"], data["forked_at_seq"], data["input"]) == (failed, 1, {"ok": True})
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.reason, entry.params) == (
        "fork",
        "api",
        "r",
        {"from_seq": 1, "input": {"ok": True}},
    )
    listed = client.get(f"{BASE}/runs/?forked_from={failed}").json()["results"]
    assert [row["id"] for row in listed] == [new_id]


@pytest.mark.parametrize(
    "body,code",
    [
        ({"from_seq": 9}, "invalid_input"),
        ({"from_seq": 0}, None),
        ({"from_seq": "1"}, None),
        ({"from_seq": True}, None),
        ({}, None),
        ("nope", None),
    ],
)
def test_api_fork_refuses_bad_input_with_json_400(api, operator, make_run, body, code):
    failed = make_run("failed")
    response = post_json(api(operator), f"{BASE}/runs/{failed}/fork/", body)
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    if code:
        assert response.json()["code"] == code and "from_seq" in response.json()["detail"]
    assert not Run.objects.filter(forked_from=failed).exists()


def test_api_fork_of_an_active_run_is_a_409(api, operator, make_run):
    waiting = make_run("waiting")
    response = post_json(api(operator), f"{BASE}/runs/{waiting}/fork/", {"from_seq": 1})
    assert response.status_code == 409 and response.json()["code"] == "invalid_run_state"
    assert "only a finished run" in response.json()["detail"]
    assert not Run.objects.filter(forked_from=waiting).exists()
