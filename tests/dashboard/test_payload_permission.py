"""Payloads in the admin and the REST API only with durable.view_payloads (with the codec on and off)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import override_settings
from django.urls import reverse

import durable
from durable.testing import run_until_settled

pytestmark = pytest.mark.django_db

BASE = "/api/durable"
KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()
CODEC = {"TRANSPORT": "manual", "LEASE": 30, "CODEC": "durable.codecs.AESGCMCodec", "CODEC_KEYS": {"k": KEY}}
SECRETS = ("CARD-4111", "card declined", "SIGNAL-3530")


@pytest.fixture(params=["codec", "plain"])
def settings_for(request: pytest.FixtureRequest) -> Any:
    with override_settings(DURABLE=CODEC if request.param == "codec" else {"TRANSPORT": "manual", "LEASE": 30}):
        yield request.param


def runs() -> tuple[str, str]:
    failed = run_until_settled(durable.start("dash_fail", {"card": "CARD-4111"})).id
    waiting = durable.start("dash_wait", {"card": "CARD-4111"})
    run_until_settled(waiting)
    durable.signal(waiting, "other", {"code": "SIGNAL-3530"})  # buffered: nobody waits for "other"
    return failed, waiting


def test_the_admin_shows_payloads_only_with_view_payloads(settings_for, make_user, client):
    failed, waiting = runs()
    client.force_login(make_user("no-payloads", "retry", payloads=False))
    hidden = [
        client.get(reverse("admin:durable_run_change", args=[quote(r)])).content.decode() for r in (failed, waiting)
    ]
    listing = client.get("/admin/durable/run/").content.decode()
    download = client.get(reverse("admin:durable_run_download", args=[quote(failed)])).content.decode()
    for text in [*hidden, listing, download]:
        assert not any(secret in text for secret in SECRETS)
    assert "&quot;hidden&quot;: true" in hidden[0] and "&quot;bytes&quot;" in hidden[0]
    assert "step_failed" in hidden[0] and "step_failed" in listing  # the error code stays visible
    client.force_login(make_user("payloads", "retry"))
    shown = [
        client.get(reverse("admin:durable_run_change", args=[quote(r)])).content.decode() for r in (failed, waiting)
    ]
    assert "CARD-4111" in shown[0] and "card declined" in shown[0] and "SIGNAL-3530" in shown[1]
    # The list previews the message from the column: only a clear one (the codec keeps it in the envelope).
    assert ("card declined" in client.get("/admin/durable/run/").content.decode()) is (settings_for == "plain")


def test_the_api_shows_payloads_only_with_view_payloads(settings_for, make_user, api):
    failed, waiting = runs()
    without = api(make_user("no-payloads", payloads=False))
    body = without.get(f"{BASE}/runs/{failed}/").json()
    assert body["input"] == {"hidden": True, "bytes": len('{"card":"CARD-4111"}')}
    assert body["error"]["hidden"] is True and body["error"]["code"] == "step_failed" and "message" not in body["error"]
    assert all(cp["output"] is None or cp["output"].get("hidden") for cp in body["checkpoints"])
    signals = without.get(f"{BASE}/runs/{waiting}/").json()["buffered_signals"]
    assert signals[0]["payload"] == {"hidden": True, "bytes": len('{"code":"SIGNAL-3530"}')}
    with_payloads = api(make_user("payloads"))
    shown = with_payloads.get(f"{BASE}/runs/{failed}/").json()
    assert shown["input"] == {"card": "CARD-4111"} and "card declined" in shown["error"]["message"]
    assert with_payloads.get(f"{BASE}/runs/{waiting}/").json()["buffered_signals"][0]["payload"] == {
        "code": "SIGNAL-3530"
    }


def test_a_payload_that_does_not_decode_shows_as_such_not_as_an_error_page(make_user, client, api):
    from tests.test_codec import tamper

    with override_settings(DURABLE=CODEC):
        run_id = durable.start("dash_wait", {"card": "CARD-4111"})
        tamper(run_id)
        client.force_login(make_user("payloads", "retry"))
        page = client.get(reverse("admin:durable_run_change", args=[quote(run_id)]))
        body = api(make_user("api-payloads")).get(f"{BASE}/runs/{run_id}/").json()
    assert page.status_code == 200 and "does not decrypt with key" in page.content.decode()
    assert body["input"]["undecodable"] is True and "does not decrypt with key 'k'" in body["input"]["reason"]
