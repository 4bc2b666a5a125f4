"""The admin's workers page: namespaces with work, the live workers serving them, and each worker's scope."""

from __future__ import annotations

import pytest
from django.urls import reverse

import durable
from tests.test_health_namespaces import advertise, tenancy_health_flow

pytestmark = pytest.mark.django_db

WORKERS = reverse("admin:durable_run_workers")


def test_the_workers_page_shows_an_unserved_namespace(admin_client, make_user, client):
    advertise("w-a", ["a"])
    durable.start(tenancy_health_flow, namespace="a")
    durable.start(tenancy_health_flow, namespace="b")
    page = admin_client.get(WORKERS)
    html = page.content.decode()
    rows = {n["name"]: (n["state"].pending_runs, n["state"].live_workers) for n in page.context["namespaces"]}
    assert rows == {"a": (1, 1), "b": (1, 0)}
    assert "none: its work waits" in html and 'class="durable-unserved"' in html
    assert "<td>a</td>" in html  # the worker's scope
    # A user whose grants name namespace a sees only it.
    client.force_login(make_user("scoped-a", namespaces=("a",)))
    names = [n["name"] for n in client.get(WORKERS).context["namespaces"]]
    assert names == ["a"]
