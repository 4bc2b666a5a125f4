from __future__ import annotations

import os

import pytest
from django.db import connection

from tests import workflows as _shared_workflows  # noqa: F401  (registers them)

IN_CI = os.environ.get("CI") == "true"


def pytest_configure(config: pytest.Config) -> None:
    # The test kit's pytest plugin, as an installed package registers it (the pytest11 entry point "durable").
    if not config.pluginmanager.has_plugin("durable"):
        config.pluginmanager.import_plugin("durable.pytest_plugin")


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _require_services(request: pytest.FixtureRequest) -> None:
    # A PostgreSQL-only test on another database fails loudly rather than skipping.
    if request.node.get_closest_marker("postgres") and not is_postgres():
        pytest.fail("this test needs PostgreSQL: set DATABASE_URL=postgres://... (scripts/test does)")


@pytest.fixture(autouse=True)
def _isolated_engine():
    """Each test starts with the real clock."""
    from durable import runtime
    from durable.engine.clock import SystemClock

    previous = runtime.install_clock(SystemClock())
    yield
    runtime.install_clock(previous)
