"""The health check (``durable.observability.health``), its API endpoint and its command."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import override_settings
from rest_framework.test import APIClient

import durable
from durable import runtime
from durable.models import Run, WorkerDescriptor
from durable.observability import health, snapshot
from durable.runtime import get_engine
from durable.testing import fake_clock

pytestmark = pytest.mark.django_db

CELERY = {"TRANSPORT": "celery", "LEASE": 30}


@pytest.fixture(autouse=True)
def broker_answers(monkeypatch):
    """The broker is checked for real by the integration test; here it answers."""
    monkeypatch.setattr(health, "_broker", lambda: None)


@durable.step(queue="hq")
def hq_work(x: int) -> int:
    return x


@durable.workflow(name="health_flow")
def health_flow(ctx):
    return ctx.step(hq_work, 1)


@durable.workflow(name="health_sleeper")
def health_sleeper(ctx):
    ctx.sleep("1h")


def pending_step_on_hq() -> str:
    """A run whose step waits on queue ``hq`` (the manual transport sends nothing)."""
    run_id = durable.start(health_flow)
    get_engine().run_turn(run_id)
    assert Run.objects.get(id=run_id).status == "suspended"
    return run_id


def advertise(queue: str) -> None:
    now = runtime.now()
    WorkerDescriptor.objects.create(
        id=f"w-{queue}", hostname="h", pid=1, queues=[queue], heartbeat_at=now, expires_at=now + timedelta(minutes=1)
    )


def test_an_idle_system_is_healthy():
    result = health.check()
    assert result.healthy, result.body
    body = result.body
    assert (body["status"], body["problems"], body["database"], body["broker"]) == (
        "ok",
        [],
        {"ok": True, "error": None},
        None,
    )
    assert body["queues_without_workers"] == [] and body["stale_runs"]["running_past_lease"] == 0


def test_a_queue_with_pending_steps_and_no_live_worker_is_unhealthy():
    with fake_clock():
        pending_step_on_hq()
        with override_settings(DURABLE=CELERY):
            result = health.check()
            assert not result.healthy
            assert result.body["queues_without_workers"] == ["hq"]
            assert result.body["queues"]["hq"] == {
                "live_workers": 0,
                "pending_steps": 1,
                "oldest_pending_step_seconds": 0.0,
            }
            assert result.body["broker"] == {"ok": True, "error": None}
            advertise("hq")
            assert health.check().healthy


def test_a_step_waiting_past_the_threshold_is_unhealthy():
    with fake_clock() as clock:
        pending_step_on_hq()
        clock.advance(timedelta(minutes=4))
        assert health.check().healthy  # the manual transport: no worker advertisement to judge
        clock.advance(timedelta(minutes=2))
        result = health.check()
    assert not result.healthy
    assert result.body["oldest_pending_step"] == {"queue": "hq", "age_seconds": 360.0, "threshold_seconds": 300.0}
    assert result.body["stale_runs"]["steps_pending_too_long"] == 1


def test_an_overdue_timer_and_a_stale_run_are_unhealthy():
    with fake_clock() as clock:
        run_id = durable.start(health_sleeper)
        get_engine().run_turn(run_id)
        clock.advance(timedelta(hours=1, seconds=30))
        assert health.check().healthy
        clock.advance(timedelta(seconds=31))
        result = health.check()
        assert not result.healthy
        assert result.body["most_overdue_timer"] == {"age_seconds": 61.0, "threshold_seconds": 60.0}
        clock.advance(timedelta(minutes=5))
        snap = snapshot.take(samples=True)
    assert snap.stale["suspended_past_wake"] == 1 and snap.stale_samples["suspended_past_wake"] == [run_id]


def test_a_run_running_past_its_lease_is_stale():
    run_id = durable.start(health_sleeper)
    Run.objects.filter(id=run_id).update(
        status="running", locked_by="gone", locked_until=runtime.now() - timedelta(minutes=6)
    )
    result = health.check()
    assert not result.healthy and result.body["stale_runs"]["running_past_lease"] == 1
    assert "1 run(s) running past their lease" in result.body["problems"]


def test_an_unreachable_database_is_unhealthy(monkeypatch):
    monkeypatch.setattr(health, "_database", lambda: "OperationalError: connection refused")
    result = health.check()
    assert not result.healthy
    assert result.body["database"] == {"ok": False, "error": "OperationalError: connection refused"}
    assert result.body["problems"] == ["database unreachable"]


def test_an_unreachable_broker_is_unhealthy(monkeypatch):
    monkeypatch.setattr(health, "_broker", lambda: "OperationalError: [Errno 111] Connection refused")
    with override_settings(DURABLE=CELERY):
        result = health.check()
    assert not result.healthy and result.body["problems"] == ["broker unreachable"]


def test_the_command_prints_the_body_and_exits_1_when_unhealthy():
    out = StringIO()
    call_command("durable_health", stdout=out)
    assert json.loads(out.getvalue())["status"] == "ok"
    with fake_clock():
        pending_step_on_hq()
        with override_settings(DURABLE=CELERY), pytest.raises(SystemExit) as exited:
            call_command("durable_health", stdout=StringIO())
    assert exited.value.code == 1


def test_the_endpoint_answers_probes_200_or_503():
    client = APIClient()
    response = client.get("/api/durable/health/")
    assert (response.status_code, response["Content-Type"], response.json()["status"]) == (
        200,
        "application/json",
        "ok",
    )
    with fake_clock():
        pending_step_on_hq()
        with override_settings(DURABLE=CELERY):
            response = client.get("/api/durable/health/")
    assert response.status_code == 503 and response.json()["queues_without_workers"] == ["hq"]


def test_with_a_health_token_the_endpoint_needs_it():
    client = APIClient()
    with override_settings(DURABLE_DASHBOARD={"HEALTH_TOKEN": "s3cret"}):
        refused = client.get("/api/durable/health/")
        wrong = client.get("/api/durable/health/", HTTP_AUTHORIZATION="Bearer nope")
        right = client.get("/api/durable/health/", HTTP_AUTHORIZATION="Bearer s3cret")
        viewer = User.objects.create_user("viewer")
        viewer.user_permissions.add(Permission.objects.get(codename="view_run"))
        client.force_authenticate(viewer)
        as_viewer = client.get("/api/durable/health/")
    assert refused.status_code in (401, 403) and refused["Content-Type"] == "application/json"
    assert (wrong.status_code, right.status_code, as_viewer.status_code) == (refused.status_code, 200, 200)
