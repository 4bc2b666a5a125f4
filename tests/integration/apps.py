"""App entry that makes Celery worker subprocesses auto-discover the integration workflows.

:mod:`tests.integration.settings` installs it; ``durable``'s app config then imports
``tests.integration.workflows`` in every worker, exactly as a user's app is discovered.

``$DURABLE_IT_FAULT`` injects a fault into the worker process (test instrumentation only):

``fleet_check_once``  the first "does a live worker serve this step?" query raises a
                      database error (as a statement timeout would), leaving the
                      connection usable.

``$DURABLE_IT_SPANS`` installs the OpenTelemetry SDK and appends every finished span
to that file (the trace test).
"""

from __future__ import annotations

import os
from typing import Any

from django.apps import AppConfig


class IntegrationConfig(AppConfig):
    name = "tests.integration"
    label = "durable_it"
    verbose_name = "django-durable Celery integration suite"

    def ready(self) -> None:
        if os.environ.get("DURABLE_IT_FAULT") == "fleet_check_once":
            _fail_first_fleet_check()
        if os.environ.get("DURABLE_IT_SPANS"):
            # The OpenTelemetry SDK, exporting this worker's spans to the file the test reads.
            from tests.otel_kit import install

            install()


def _fail_first_fleet_check() -> None:
    import threading

    from django.db import OperationalError

    from durable.fleet import DbFleet

    original = DbFleet.can_serve
    lock = threading.Lock()
    fired: list[bool] = []

    def can_serve(self: Any, step: str, queue: str | None) -> bool:
        with lock:
            first = not fired
            fired.append(True)
        if first:
            raise OperationalError("canceling statement due to statement timeout (injected by the test)")
        return original(self, step, queue)

    DbFleet.can_serve = can_serve  # type: ignore[method-assign]
