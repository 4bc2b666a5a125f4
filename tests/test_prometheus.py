"""``GET /api/durable/metrics``: exact values after a known workload, and never for anonymous callers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

import durable
from durable import runtime
from durable.models import Run
from durable.runtime import get_engine
from durable.testing import fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

URL = "/api/durable/metrics"
TOKEN = {"METRICS_TOKEN": "scrape-me"}


@durable.step(queue="reports")
def prom_report(x: int) -> int:
    return x


@durable.workflow(name="prom_ok")
def prom_ok(ctx, x):
    return x


@durable.workflow(name="prom_bad")
def prom_bad(ctx):
    raise ValueError("no")


@durable.workflow(name="prom_waits")
def prom_waits(ctx):
    return ctx.step(prom_report, 1)


def scrape(client: APIClient, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get(URL, **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_a_scrape_after_a_known_workload_gives_its_exact_counts():
    with fake_clock() as clock:
        for n in range(3):
            run_until_settled(durable.start(prom_ok, n))
        for _ in range(2):
            run_until_settled(durable.start(prom_bad))
        cancelled = durable.start(prom_waits)
        durable.cancel(cancelled)
        waiting = durable.start(prom_waits)
        get_engine().run_turn(waiting)  # its step waits on queue "reports" (nothing runs it)
        clock.advance(timedelta(seconds=90))
        with override_settings(DURABLE_DASHBOARD=TOKEN):
            got = scrape(APIClient(), HTTP_AUTHORIZATION="Bearer scrape-me")
    assert got[("durable_runs", (("status", "completed"), ("workflow", "prom_ok")))] == 3
    assert got[("durable_runs", (("status", "failed"), ("workflow", "prom_bad")))] == 2
    assert got[("durable_runs", (("status", "cancelled"), ("workflow", "prom_waits")))] == 1
    assert got[("durable_runs", (("status", "suspended"), ("workflow", "prom_waits")))] == 1
    assert got[("durable_runs_started_total", (("workflow", "prom_ok"),))] == 3
    assert got[("durable_runs_started_total", (("workflow", "prom_waits"),))] == 2
    assert got[("durable_steps_pending", (("queue", "reports"),))] == 1
    assert got[("durable_steps_oldest_pending_age_seconds", (("queue", "reports"),))] == 90.0
    assert got[("durable_runs_stale", (("kind", "running_past_lease"),))] == 0
    assert not any(name == "durable_workers_live" for name, _ in got)  # not Celery: unknown, not zero
    assert not any("run_id" in dict(labels) for _, labels in got)


def test_stale_runs_are_counted():
    run_id = durable.start(prom_ok, 1)
    Run.objects.filter(id=run_id).update(
        status="running", locked_by="gone", locked_until=runtime.now() - timedelta(hours=1)
    )
    viewer = User.objects.create_user("viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_run"))
    client = APIClient()
    client.force_authenticate(viewer)
    got = scrape(client)
    assert got[("durable_runs_stale", (("kind", "running_past_lease"),))] == 1


@pytest.mark.parametrize(
    "headers",
    [{}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": "Basic c2NyYXBlLW1l"}],
)
def test_anonymous_and_wrong_tokens_are_refused(headers):
    with override_settings(DURABLE_DASHBOARD=TOKEN):
        response = APIClient().get(URL, **headers)
    assert response.status_code in (401, 403)
    assert response["Content-Type"] == "application/json" and response.json()["detail"]


def test_without_a_configured_token_anonymous_callers_are_still_refused():
    response = APIClient().get(URL, HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code in (401, 403)


def test_a_user_without_the_view_permission_is_refused():
    client = APIClient()
    client.force_authenticate(User.objects.create_user("nobody"))
    assert client.get(URL).status_code == 403
