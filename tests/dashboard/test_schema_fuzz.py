"""Fuzz the REST API from its own OpenAPI schema (schemathesis), in-process against the WSGI app.

Every operation gets schema-valid and schema-invalid requests; no answer may be
a 5xx, and every answer must match the schema (status code, content type,
body). Bounded (``max_examples``) and derandomized to keep the suite quick and stable.
"""

from __future__ import annotations

import json
import os

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import durable

# The suite replays the same bounded set of cases (no flaky CI); for a longer, random session:
#   DASHBOARD_FUZZ_EXAMPLES=200 DASHBOARD_FUZZ_RANDOM=1 pytest tests/dashboard/test_schema_fuzz.py
EXAMPLES = int(os.environ.get("DASHBOARD_FUZZ_EXAMPLES", "10"))
RANDOM = os.environ.get("DASHBOARD_FUZZ_RANDOM") == "1"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def fuzz_headers(db) -> dict[str, str]:
    user = User.objects.create_superuser("fuzzer", "fuzz@example.com", "pw")
    token = Token.objects.create(user=user)
    # A few runs so list and detail answers carry real rows.
    durable.start("dash_wait", {"n": 1}, run_id="fuzz-1", tags=["fuzz"])
    durable.start("dash_sleep", run_id="fuzz-2")
    return {"Authorization": f"Token {token.key}"}


def _load_schema() -> schemathesis.BaseSchema:
    """The API's OpenAPI document as drf-spectacular serves it, bound to Django's WSGI handler."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    loaded = schemathesis.openapi.from_dict(json.loads(OpenApiJsonRenderer().render(document)))
    loaded.app = WSGIHandler()
    return loaded


schema = _load_schema()


@pytest.fixture(autouse=True)
def _keep_test_connection():
    """The WSGI handler closes connections after each request; the test transaction needs them open."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=not RANDOM,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_api_answers_match_the_schema_and_never_5xx(case, fuzz_headers):
    case.call_and_validate(headers=fuzz_headers, checks=CHECKS)
