"""Callbacks and breakpoints in the dashboard: the public callback URL, "continue", what the pages show."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

import durable
from durable.engine import callbacks
from durable.models import BufferedSignal, Checkpoint, Run
from durable.runtime import get_engine
from durable.testing import run_until_settled
from durable_dashboard.models import AuditEntry

pytestmark = pytest.mark.django_db

BASE = "/api/durable"


@durable.workflow(name="dash_callback")
def dash_callback(ctx):
    cb = ctx.wait_for_callback("shipment")
    try:
        return {"payload": cb.wait()}
    except durable.CallbackFailed as exc:
        return {"failed": exc.error}


@durable.workflow(name="dash_breakpoint")
def dash_breakpoint(ctx):
    ctx.local_step("prepare", lambda: 1)
    ctx.breakpoint("before ship")
    return "shipped"


def waiting_callback() -> tuple[str, str]:
    run_id = durable.start(dash_callback)
    assert run_until_settled(run_id).status == "suspended"
    return run_id, callbacks.make_token(get_engine().settings.callback_secret, run_id, 1)


def paused() -> str:
    run_id = durable.start(dash_breakpoint)
    assert run_until_settled(run_id).status == "suspended"
    return run_id


def detail(run_id: str) -> str:
    return reverse("admin:durable_run_change", args=[quote(run_id)])


def act(run_id: str, action: str) -> str:
    return reverse("admin:durable_run_act", args=[quote(run_id), action])


# -- the callback URL ----------------------------------------------------------------------


def test_the_callback_url_needs_no_session_nor_csrf_and_stores_the_body():
    run_id, token = waiting_callback()
    anonymous = Client(enforce_csrf_checks=True)
    response = anonymous.post(
        f"{BASE}/callbacks/{token}/", json.dumps({"tracking": "X1"}), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "outcome": "completed"}
    assert run_until_settled(run_id).output == {"payload": {"tracking": "X1"}}


def test_a_plain_text_body_is_its_text_and_an_empty_one_null():
    run_id, token = waiting_callback()
    Client().post(f"{BASE}/callbacks/{token}/", "delivered", content_type="text/plain")
    assert run_until_settled(run_id).output == {"payload": "delivered"}
    run_id, token = waiting_callback()
    Client().post(f"{BASE}/callbacks/{token}/", "", content_type="application/json")
    assert run_until_settled(run_id).output == {"payload": None}


def test_a_wrong_signature_is_a_json_403_and_writes_nothing():
    run_id, token = waiting_callback()
    body, signature = token.split(".")
    for bad in (f"{body}.{signature[::-1]}", f"{body}x.{signature}", "not-a-token"):
        response = Client().post(f"{BASE}/callbacks/{bad}/", "1", content_type="application/json")
        assert response.status_code == 403 and response["Content-Type"] == "application/json"
        assert response.json()["code"] == "invalid_callback_token"
    assert Checkpoint.objects.get(run_id=run_id, seq=1).status == "pending"
    assert not BufferedSignal.objects.filter(run_id=run_id).exists()


def test_a_duplicate_is_a_409_and_an_unknown_callback_a_404():
    _run_id, token = waiting_callback()
    assert Client().post(f"{BASE}/callbacks/{token}/", "1", content_type="application/json").status_code == 200
    again = Client().post(f"{BASE}/callbacks/{token}/", "2", content_type="application/json")
    assert again.status_code == 409 and again.json()["code"] == "callback_already_completed"
    assert "already completed" in again.json()["detail"]
    other = callbacks.make_token(get_engine().settings.callback_secret, "no-such-run", 1)
    missing = Client().post(f"{BASE}/callbacks/{other}/", "1", content_type="application/json")
    assert missing.status_code == 404 and missing.json()["code"] == "callback_not_found"
    assert Client().get(f"{BASE}/callbacks/{token}/").status_code == 405


def test_the_fail_url_fails_the_callback():
    run_id, token = waiting_callback()
    response = Client().post(
        f"{BASE}/callbacks/{token}/fail/", json.dumps({"message": "lost"}), content_type="application/json"
    )
    assert response.status_code == 200 and response.json()["outcome"] == "failed"
    assert run_until_settled(run_id).output == {"failed": {"message": "lost"}}


def test_the_token_is_never_shown_to_viewers(api, viewer, admin_client):
    run_id, token = waiting_callback()
    data = api(viewer).get(f"{BASE}/runs/{run_id}/")
    assert data.status_code == 200 and token not in data.content.decode()
    assert [w["name"] for w in data.json()["waiters"]] == ["__callback__:…"]
    page = admin_client.get(detail(run_id)).content.decode()
    assert token not in page and "shipment" in page


# -- breakpoints ---------------------------------------------------------------------------


def test_the_admin_shows_the_breakpoint_and_continue_resumes_the_run(admin_client):
    run_id = paused()
    page = admin_client.get(detail(run_id)).content.decode()
    assert "Paused at breakpoint <strong>before ship</strong>" in page
    assert 'data-action="continue"' in page
    response = admin_client.post(act(run_id, "continue"), {"reason": "checked"}, follow=True)
    assert any("continued past breakpoint 'before ship'" in str(m) for m in response.context["messages"])
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.ok, entry.reason) == ("continue", True, "checked")
    assert run_until_settled(run_id).output == "shipped"
    assert "Paused at breakpoint" not in admin_client.get(detail(run_id)).content.decode()


def test_continue_is_offered_only_while_paused_and_refused_otherwise(admin_client, make_run):
    waiting = make_run("waiting")
    assert 'data-action="continue"' not in admin_client.get(detail(waiting)).content.decode()
    response = admin_client.post(act(waiting, "continue"), follow=True)
    assert any("not paused at a breakpoint" in str(m) for m in response.context["messages"])
    assert AuditEntry.objects.get().ok is False


def test_the_api_shows_where_a_run_is_paused_and_continues_it(api, operator, viewer):
    run_id = paused()
    data = api(viewer).get(f"{BASE}/runs/{run_id}/").json()
    assert data["paused_at"] == "before ship"
    assert api(viewer).post(f"{BASE}/runs/{run_id}/continue/").status_code == 403
    client = api(operator)
    done = client.post(f"{BASE}/runs/{run_id}/continue/")
    assert done.status_code == 200 and done.json()["result"] == {"breakpoint": "before ship"}
    again = client.post(f"{BASE}/runs/{run_id}/continue/")
    assert again.status_code == 404 and again.json()["code"] == "breakpoint_not_found"
    assert run_until_settled(run_id).output == "shipped"
    assert client.get(f"{BASE}/runs/{run_id}/").json()["paused_at"] is None
    assert Run.objects.get(id=run_id).status == "completed"
