"""An app entry that registers the schedule tests' workflows in ``durable_worker`` subprocesses."""

from __future__ import annotations

from django.apps import AppConfig


class ScheduleWorkflowsConfig(AppConfig):
    name = "tests"
    label = "durable_schedule_tests"
    verbose_name = "django-durable schedule tests"

    def ready(self) -> None:
        import tests.schedule_workflows  # noqa: F401  (registers the workflows)
