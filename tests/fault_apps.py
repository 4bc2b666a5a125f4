"""An app entry that registers the fault-suite workflows in worker subprocesses.

``manage.py durable_worker`` only auto-discovers ``workflows.py`` of installed
apps; :mod:`tests.fault_settings` installs this config so a worker started by
tests/test_faults.py knows the workflows the test process starts.
"""

from __future__ import annotations

from django.apps import AppConfig


class FaultWorkflowsConfig(AppConfig):
    name = "tests"
    label = "durable_fault_tests"
    verbose_name = "django-durable fault suite"

    def ready(self) -> None:
        import tests.fault_workflows  # noqa: F401  (registers the workflows)
