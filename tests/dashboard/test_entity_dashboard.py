"""Entities in the dashboard: the read-only admin pages and ``GET /api/durable/entities/{name}/{key}/``."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

import durable
from durable.models import Entity

pytestmark = pytest.mark.django_db

URL = "/api/durable/entities/"


@durable.entity("d_stock", initial={"units": 0})
class Stock:
    def receive(self, units: int) -> int:
        self.state["units"] += units
        return int(self.state["units"])

    def ship(self, units: int) -> int:
        if units > self.state["units"]:
            raise ValueError(f"only {self.state['units']} in stock")
        self.state["units"] -= units
        return int(self.state["units"])


def user_with(name: str, *codenames: str, staff: bool = False) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=staff)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="durable", codename__in=codenames))
    return User.objects.get(pk=user.pk)


def stocked() -> Entity:
    durable.call_entity("d_stock", "sku-1", "receive", 5)
    durable.call_entity("d_stock", "sku-1", "receive", 3)
    with pytest.raises(durable.EntityOpFailed):
        durable.call_entity("d_stock", "sku-1", "ship", 100)
    return Entity.objects.get(name="d_stock", key="sku-1")


def test_the_admin_lists_entities_and_shows_the_state_and_the_recent_ops_read_only() -> None:
    entity = stocked()
    client = Client()
    client.force_login(user_with("viewer", "view_entity", "view_payloads", staff=True))
    listing = client.get(reverse("admin:durable_entity_changelist")).content.decode()
    assert "sku-1" in listing and "d_stock" in listing
    page = client.get(reverse("admin:durable_entity_change", args=[entity.pk]))
    text = page.content.decode()
    assert page.status_code == 200
    assert "&quot;units&quot;: 8" in text  # the state
    assert "ValueError: only 8 in stock" in text and "receive" in text  # the ops, the failure with its error
    assert 'name="_save"' not in text  # nothing to save
    assert client.get(reverse("admin:durable_entity_add")).status_code == 403
    assert client.post(reverse("admin:durable_entity_delete", args=[entity.pk]), {"post": "yes"}).status_code == 403
    assert Entity.objects.filter(pk=entity.pk).exists()


def test_the_admin_pages_need_view_entity() -> None:
    entity = stocked()
    client = Client()
    client.force_login(user_with("stranger", staff=True))
    assert client.get(reverse("admin:durable_entity_changelist")).status_code == 403
    assert client.get(reverse("admin:durable_entity_change", args=[entity.pk])).status_code == 403


def test_the_api_answers_the_state_and_the_newest_ops(api: Any) -> None:
    stocked()
    client = api(user_with("reader", "view_entity", "view_payloads"))
    body = client.get(URL + "d_stock/sku-1/").json()
    assert (body["name"], body["key"], body["state"], body["ops"]) == ("d_stock", "sku-1", {"units": 8}, 3)
    assert [(op["seq"], op["op"], op["status"], op["result"]) for op in body["recent_ops"]] == [
        (3, "ship", "failed", None),
        (2, "receive", "completed", 8),
        (1, "receive", "completed", 5),
    ]
    assert body["recent_ops"][0]["error"]["type"] == "ValueError"
    assert [op["seq"] for op in client.get(URL + "d_stock/sku-1/?ops=1").json()["recent_ops"]] == [3]
    untouched = client.get(URL + "d_stock/sku-2/").json()
    assert (untouched["state"], untouched["ops"], untouched["recent_ops"]) == ({"units": 0}, 0, [])
    assert not Entity.objects.filter(key="sku-2").exists()


def test_the_api_refuses_with_json(api: Any) -> None:
    client = api(user_with("reader", "view_entity", "view_payloads"))
    missing = client.get(URL + "nope/k/")
    assert missing.status_code == 404 and missing.json()["code"] == "entity_not_found"
    bad = client.get(URL + "d_stock/sku-1/?ops=lots")
    assert bad.status_code == 400 and "ops must be an integer" in bad.json()["detail"]
    denied = api(user_with("nobody")).get(URL + "d_stock/sku-1/")
    assert denied.status_code == 403 and "durable.view_entity" in denied.json()["detail"]
    assert api(None).get(URL + "d_stock/sku-1/").status_code in (401, 403)


def test_without_view_payloads_the_state_and_the_ops_show_only_their_size(api: Any) -> None:
    entity = stocked()
    body = api(user_with("reader", "view_entity")).get(URL + "d_stock/sku-1/").json()
    assert body["state"] == {"hidden": True, "bytes": len('{"units":8}')} and body["ops"] == 3
    assert [(op["arg"], op["result"]) for op in body["recent_ops"][1:]] == [
        ({"hidden": True, "bytes": 1}, {"hidden": True, "bytes": 1}),
        ({"hidden": True, "bytes": 1}, {"hidden": True, "bytes": 1}),
    ]
    error = body["recent_ops"][0]["error"]
    assert error["hidden"] is True and error["type"] == "ValueError" and "message" not in error
    client = Client()
    client.force_login(user_with("viewer", "view_entity", staff=True))
    text = client.get(reverse("admin:durable_entity_change", args=[entity.pk])).content.decode()
    assert "only 8 in stock" not in text and "&quot;units&quot;" not in text
    assert "&quot;hidden&quot;: true" in text and "receive" in text
