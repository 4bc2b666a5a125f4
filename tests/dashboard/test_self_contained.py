"""The dashboard behaves as documented whatever the project's settings, and says what it is missing.

Each prerequisite removed from the settings gives its own system check error
(naming it) instead of a failure at request time; the API keeps its
authentication, errors, throttling, parser and schema with an empty
``REST_FRAMEWORK``; errors are JSON even when the database is down or the
body is too large.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlparse

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import OperationalError
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from durable_dashboard import checks as dash_checks
from durable_dashboard.checks import APPS, MIDDLEWARE, dashboard_problems

BASE = "/api/durable"


def _problems(**changes: Any) -> list[Any]:
    values: dict[str, Any] = {
        "installed": list(settings.INSTALLED_APPS),
        "middleware": list(settings.MIDDLEWARE),
        "templates": list(settings.TEMPLATES),
        "options": getattr(settings, "DURABLE_DASHBOARD", None),
    }
    values.update(changes)
    return dashboard_problems(**values)


def test_the_example_settings_have_every_prerequisite() -> None:
    assert _problems() == []


@pytest.mark.parametrize("app", sorted(APPS))
def test_a_missing_app_is_an_error_naming_it(app: str) -> None:
    found = _problems(installed=[a for a in settings.INSTALLED_APPS if a != app])
    assert [(m.id, app in m.msg) for m in found] == [("durable_dashboard.E002", True)]


@pytest.mark.parametrize("path", sorted(MIDDLEWARE))
def test_a_missing_middleware_is_an_error_naming_it(path: str) -> None:
    found = _problems(middleware=[m for m in settings.MIDDLEWARE if m != path])
    assert [(m.id, path in m.msg) for m in found] == [("durable_dashboard.E003", True)]


def test_no_template_engine_for_app_templates_is_an_error() -> None:
    engine = {**settings.TEMPLATES[0], "APP_DIRS": False}
    assert [m.id for m in _problems(templates=[engine])] == ["durable_dashboard.E004"]


@pytest.mark.parametrize("module", sorted(dash_checks.PACKAGES))
def test_a_missing_package_is_an_error_naming_it_with_the_extra(monkeypatch, module: str) -> None:
    real = dash_checks.importlib.util.find_spec
    monkeypatch.setattr(dash_checks.importlib.util, "find_spec", lambda name: None if name == module else real(name))
    found = _problems()
    assert [m.id for m in found] == ["durable_dashboard.E001"]
    assert dash_checks.PACKAGES[module] in found[0].msg and "django-durable[dashboard]" in found[0].hint


def test_unknown_options_and_every_problem_at_once() -> None:
    found = _problems(
        middleware=[],
        options={"BULK_LIMIT": 5, "THROTLE_RATE": "1/s"},
        installed=[a for a in settings.INSTALLED_APPS if a != "drf_spectacular_sidecar"],
    )
    assert sorted(m.id for m in found) == [
        "durable_dashboard.E003",
        "durable_dashboard.E003",
        "durable_dashboard.E003",
        "durable_dashboard.W001",
        "durable_dashboard.W002",
    ]
    assert any("THROTLE_RATE" in m.msg for m in found)


@pytest.mark.django_db
def test_manage_py_check_reports_a_removed_middleware() -> None:
    without = [m for m in settings.MIDDLEWARE if "MessageMiddleware" not in m]
    with override_settings(MIDDLEWARE=without), pytest.raises(SystemCheckError, match=r"durable_dashboard\.E003"):
        call_command("check")


# -- the API without the project's REST_FRAMEWORK -----------------------------------------------


@pytest.fixture
def operator_token(db) -> str:
    from django.contrib.auth.models import User

    user = User.objects.create_superuser("op", "op@example.com", "pw")
    return Token.objects.create(user=user).key


@pytest.mark.django_db
@override_settings(REST_FRAMEWORK={}, DURABLE_DASHBOARD={"THROTTLE_RATE": "3/minute"})
def test_the_api_keeps_its_policy_with_an_empty_rest_framework_setting(operator_token: str) -> None:
    from django.core.cache import cache

    cache.clear()
    anonymous = APIClient().get(f"{BASE}/runs/")
    assert anonymous.status_code in (401, 403)
    assert anonymous.json()["code"] in ("not_authenticated", "permission_denied")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {operator_token}")
    bad = client.post(f"{BASE}/runs/", {"workflow": "no-such-workflow"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] in ("workflow_not_found", "invalid")
    form = client.post(f"{BASE}/runs/", "workflow=x", content_type="application/x-www-form-urlencoded")
    assert form.status_code == 415  # JSON only, whatever DRF's default parsers are
    assert client.get(f"{BASE}/runs/").status_code == 200
    throttled = client.get(f"{BASE}/runs/")  # the 4th request: the dashboard's own throttle
    assert throttled.status_code == 429 and throttled.json()["code"] == "throttled"
    cache.clear()


@pytest.mark.django_db
@override_settings(REST_FRAMEWORK={}, SPECTACULAR_SETTINGS={})
def test_schema_and_docs_work_without_the_projects_drf_and_spectacular_settings(admin_client) -> None:
    schema = admin_client.get(f"{BASE}/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert json.loads(schema.content)["info"]["title"] == "django-durable API"
    docs = admin_client.get(f"{BASE}/docs/")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "cdn.jsdelivr" not in page


# -- errors stay JSON --------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_database_outage_is_a_json_503_with_retry_after(admin_client, monkeypatch) -> None:
    from durable_dashboard import views

    def down(*args: object, **kwargs: object) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(views, "visible_runs", down)
    response = admin_client.get(f"{BASE}/runs/")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "5"
    assert response.json()["code"] == "database_unavailable"


@pytest.mark.django_db
def test_an_unexpected_error_is_a_json_500_without_a_traceback(admin_client, monkeypatch) -> None:
    from durable_dashboard import views

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(views, "visible_runs", broken)
    response = admin_client.get(f"{BASE}/runs/")
    assert response.status_code == 500
    assert response.json() == {"detail": "Internal error.", "code": "internal_error"}


@pytest.mark.django_db
@pytest.mark.parametrize("size", [3_000_000, 10_000_000])
def test_a_body_past_djangos_upload_limit_is_a_json_413(admin_client, size: int) -> None:
    body = json.dumps({"workflow": "dash_wait", "input": "x" * size})
    response = admin_client.post(f"{BASE}/runs/", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"


@pytest.mark.django_db(transaction=True)
def test_a_ten_megabyte_upload_over_http_gets_its_413_not_a_reset(live_server, operator_token: str) -> None:
    url = urlparse(live_server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    body = json.dumps({"workflow": "dash_wait", "input": "x" * 10_000_000}).encode()
    conn.request(
        "POST",
        f"{BASE}/runs/",
        body=body,
        headers={"Content-Type": "application/json", "Authorization": f"Token {operator_token}"},
    )
    response = conn.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["code"] == "payload_too_large"
    conn.close()
