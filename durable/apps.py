"""The Django app: discovers every installed app's ``workflows`` module and registers the system checks."""

from __future__ import annotations

import os
import sys

from django.apps import AppConfig
from django.core import checks

from durable.checks import (
    check_recovery,
    check_retention,
    check_retention_archive,
    check_settings,
    check_sweep_queue,
)


class DurableConfig(AppConfig):
    name = "durable"
    verbose_name = "Durable workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        # Every installed app's workflows.py registers its workflows and steps.
        autodiscover_modules("workflows")
        self._declare_tasks()
        # SQLite connections are set up for several writers (WAL, busy timeout, BEGIN IMMEDIATE).
        from django.db.backends.signals import connection_created

        from durable.sqlite import check_sqlite, configure_connection

        connection_created.connect(configure_connection, dispatch_uid="durable.sqlite")
        checks.register(check_settings, "durable")
        checks.register(check_recovery, "durable")
        checks.register(check_sqlite, "durable")
        checks.register(check_sweep_queue, "durable")
        checks.register(check_retention_archive, "durable")
        checks.register(check_retention, "durable")
        if _is_dev_server():
            from durable.worker import start_embedded

            start_embedded()

    @staticmethod
    def _declare_tasks() -> None:
        """With the durable Tasks backend configured, declare its workflow and steps here too."""
        from django.conf import settings

        tasks = getattr(settings, "TASKS", None)
        if tasks and any(
            isinstance(p, dict) and p.get("BACKEND") == "durable.tasks_backend.DurableBackend" for p in tasks.values()
        ):
            from durable.tasks_backend import register_configured_backends

            register_configured_backends(tasks)


def _is_dev_server() -> bool:
    """True in the process of ``runserver`` that serves requests (not the autoreloader parent)."""
    argv = sys.argv[1:2]
    if argv != ["runserver"]:
        return False
    return os.environ.get("RUN_MAIN") == "true" or "--noreload" in sys.argv
