"""Moving the test database between migrations (for the tests of a migration's data step)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(targets: list[tuple[str, str]]) -> Any:
    """Migrate to ``targets``; the historical models (``apps``) as of those migrations."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_latest() -> None:
    """Back to every app's latest migration (a test's cleanup)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes("durable"))
