"""Fixtures of the Celery integration suite: real workers on real Redis and PostgreSQL.

Every test gets a :class:`~tests.integration.harness.Cluster`: it deletes this
session's keys on our Redis database (``redis://127.0.0.1:6379/7`` unless
``$DURABLE_IT_BROKER_URL`` says otherwise; keys are prefixed per session, so
concurrent sessions do not disturb each other), switches the test process to the Celery transport on it (so
``durable.start`` dispatches through Redis, never eagerly), and starts the
``celery -A tests.integration.celery_app worker`` / ``beat`` subprocesses the
test asks for, on the *test* database. At teardown every subprocess is killed
(SIGKILL of its process group), before pytest-django empties the tables.

Per-test ``DURABLE`` options, for the test process and its workers alike::

    @pytest.mark.durable_settings(STEP_REDISPATCH_MAX=5)
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis
from django.db import connections
from django.test import override_settings

from tests.integration import workflows as _workflows  # noqa: F401  (registers them in the test process)
from tests.integration.celery_app import app as celery_app
from tests.integration.common import SESSION_ENV, broker_url, durable_settings, transport_options
from tests.integration.harness import Cluster

# This session's key prefix and connection name on Redis, inherited by the workers.
os.environ.setdefault(SESSION_ENV, f"durable-it-{os.getpid()}")
# Before anything publishes: connections are pooled with the options they were made with.
celery_app.conf.broker_url = broker_url()
celery_app.conf.broker_transport_options = transport_options()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "durable_settings(**options): DURABLE options of an integration test")


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path, transactional_db) -> Iterator[Cluster]:
    marker = request.node.get_closest_marker("durable_settings")
    extra = dict(marker.kwargs) if marker else {}
    broker = broker_url()
    cluster = Cluster(tmp_path, broker, extra)
    try:
        cluster.forget_messages()
    except redis.RedisError as exc:
        pytest.fail(f"the Celery integration suite needs Redis at {broker}: {exc}")
    # The test process publishes through this app (shared tasks bind to the current app).
    celery_app.conf.broker_url = broker
    celery_app.conf.broker_transport_options = transport_options()
    celery_app.set_current()
    celery_app.set_default()
    with override_settings(DURABLE=durable_settings(extra), CELERY_BROKER_URL=broker):
        try:
            yield cluster
        finally:
            cluster.close()
            connections.close_all()
            cluster.forget_messages()
