"""The health check and the admin's workers page report a namespace with work and no live worker serving it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

import durable
from durable import runtime
from durable.models import WorkerDescriptor
from durable.observability import health

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def broker_answers(monkeypatch):
    monkeypatch.setattr(health, "_broker", lambda: None)


@durable.workflow(name="tenancy_health_flow")
def tenancy_health_flow(ctx):
    return 1


def advertise(worker_id: str, namespaces: list[str] | None) -> None:
    now = runtime.now()
    capabilities = {"tags": []} if namespaces is None else {"tags": [], "namespaces": namespaces}
    WorkerDescriptor.objects.create(
        id=worker_id,
        hostname="h",
        pid=7,
        queues=[],
        capabilities=capabilities,
        heartbeat_at=now,
        expires_at=now + timedelta(minutes=1),
    )


def test_a_namespace_with_work_and_no_scoped_worker_is_unhealthy():
    advertise("w-a", ["a"])
    for _ in range(2):
        durable.start(tenancy_health_flow, namespace="a")
    for _ in range(3):
        durable.start(tenancy_health_flow, namespace="b")
    result = health.check()
    assert not result.healthy
    assert result.body["namespaces_without_workers"] == ["b"]
    assert result.body["namespaces"] == {
        "a": {"pending_runs": 2, "pending_steps": 0, "live_workers": 1},
        "b": {"pending_runs": 3, "pending_steps": 0, "live_workers": 0},
    }
    assert "namespace 'b' has work and no live worker serves it" in result.body["problems"]
    advertise("w-b", ["b", "c"])
    result = health.check()
    assert result.healthy, result.body
    assert result.body["namespaces"]["c"] == {"pending_runs": 0, "pending_steps": 0, "live_workers": 1}


def test_an_unscoped_worker_serves_every_namespace():
    advertise("w-a", ["a"])
    advertise("w-all", None)
    durable.start(tenancy_health_flow, namespace="b")
    result = health.check()
    assert result.healthy, result.body
    assert result.body["namespaces"]["b"]["live_workers"] == 1


def test_without_a_scoped_worker_nothing_is_judged_but_with_celery_it_is():
    durable.start(tenancy_health_flow, namespace="b")
    result = health.check()  # manual transport, no advertised worker: an embedded worker may serve it
    assert result.healthy, result.body
    assert result.body["namespaces"]["b"]["live_workers"] is None
    with override_settings(DURABLE={"TRANSPORT": "celery", "LEASE": 30}):
        result = health.check()
    assert not result.healthy and result.body["namespaces_without_workers"] == ["b"]
