"""Namespace scoping: a user limited to some namespaces sees others' runs as 404 and cannot act on them."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from django.test import override_settings

from durable.models import Run
from durable_dashboard.models import AuditEntry, NamespaceGrant
from tests.dashboard.test_api import BASE, RUN_ACTIONS, post

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(make_run):
    """One failed and one waiting run in team-a and in team-b."""
    return {
        ("team-a", "failed"): make_run("failed", run_id="a-failed", namespace="team-a"),
        ("team-a", "waiting"): make_run("waiting", run_id="a-waiting", namespace="team-a"),
        ("team-b", "failed"): make_run("failed", run_id="b-failed", namespace="team-b"),
        ("team-b", "waiting"): make_run("waiting", run_id="b-waiting", namespace="team-b"),
    }


def snapshot():
    return dict(Run.objects.values_list("id", "status"))


@pytest.mark.parametrize("action", sorted(RUN_ACTIONS))
@pytest.mark.parametrize("state", ["failed", "waiting"])
def test_other_namespace_is_404_for_every_action(api, scoped, runs, action, state):
    before = snapshot()
    _method, suffix, body, _perm = RUN_ACTIONS[action]
    response = post(api(scoped), f"{BASE}/runs/{runs[('team-b', state)]}/{suffix}", body)
    assert response.status_code == 404
    assert snapshot() == before
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("state", ["failed", "waiting"])
def test_other_namespace_is_404_for_reads(api, scoped, runs, state):
    client = api(scoped)
    run_id = runs[("team-b", state)]
    assert client.get(f"{BASE}/runs/{run_id}/").status_code == 404
    assert client.get(f"{BASE}/runs/{run_id}/events/k/").status_code == 404
    assert client.get(f"{BASE}/runs/{runs[('team-a', state)]}/").status_code == 200


def test_own_namespace_actions_work(api, scoped, runs):
    client = api(scoped)
    assert post(client, f"{BASE}/runs/a-failed/requeue/", {}).status_code == 200
    assert post(client, f"{BASE}/runs/a-waiting/cancel/", {}).status_code == 200


def test_list_and_filters_only_show_granted_namespaces(api, scoped, runs):
    client = api(scoped)
    ids = {r["id"] for r in client.get(f"{BASE}/runs/").json()["results"]}
    assert ids == {"a-failed", "a-waiting"}
    assert client.get(f"{BASE}/runs/?namespace=team-b").json()["results"] == []
    assert client.get(f"{BASE}/runs/?q=b-failed").json()["results"] == []


def test_bulk_never_reaches_other_namespaces(api, scoped, runs):
    body = {"filter": {"ids": ["a-waiting", "b-waiting"]}}
    data = post(api(scoped), f"{BASE}/runs/bulk/cancel/", body).json()
    assert data["matched"] == 1 and data["results"][0]["run_id"] == "a-waiting"
    assert Run.objects.get(id="b-waiting").status == "suspended"
    data = post(api(scoped), f"{BASE}/runs/bulk/requeue/", {"filter": {"namespace": "team-b"}}).json()
    assert data["matched"] == 0
    assert Run.objects.get(id="b-failed").status == "failed"


def test_start_in_other_namespace_is_refused(api, scoped, runs):
    client = api(scoped)
    refused = post(client, f"{BASE}/runs/", {"workflow": "dash_wait", "namespace": "team-b"})
    assert refused.status_code == 403
    default_ns = post(client, f"{BASE}/runs/", {"workflow": "dash_wait"})
    assert default_ns.status_code == 403  # "default" is not granted
    taken = post(client, f"{BASE}/runs/", {"workflow": "dash_wait", "namespace": "team-a", "run_id": "b-waiting"})
    assert taken.status_code == 409 and "b-waiting" not in taken.content.decode()
    ok = post(client, f"{BASE}/runs/", {"workflow": "dash_wait", "namespace": "team-a", "run_id": "a-new"})
    assert ok.status_code == 201
    assert (
        post(client, f"{BASE}/runs/", {"workflow": "dash_wait", "namespace": "team-a", "run_id": "a-new"}).status_code
        == 200
    )


def test_group_grant_and_wildcard(api, make_user, runs):
    user = make_user("grouped", "cancel")
    group = Group.objects.create(name="team-b-ops")
    user.groups.add(group)
    NamespaceGrant.objects.create(group=group, namespace="team-b")
    client = api(user)
    assert {r["id"] for r in client.get(f"{BASE}/runs/").json()["results"]} == {"b-failed", "b-waiting"}
    assert client.get(f"{BASE}/runs/a-waiting/").status_code == 404
    NamespaceGrant.objects.create(user=user, namespace="*")
    assert len(api(user).get(f"{BASE}/runs/").json()["results"]) == 4


def test_users_without_grants_see_everything_unless_required(api, viewer, runs, admin_user):
    assert len(api(viewer).get(f"{BASE}/runs/").json()["results"]) == 4
    with override_settings(DURABLE_DASHBOARD={"REQUIRE_NAMESPACE_GRANT": True}):
        assert api(viewer).get(f"{BASE}/runs/").json()["results"] == []
        assert api(viewer).get(f"{BASE}/runs/a-failed/").status_code == 404
        assert len(api(admin_user).get(f"{BASE}/runs/").json()["results"]) == 4  # superusers are never limited


def test_grant_needs_user_or_group(db):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        NamespaceGrant.objects.create(namespace="x")
    assert json.dumps(str(NamespaceGrant(namespace="x", user=None, group=Group(name="g"))))
