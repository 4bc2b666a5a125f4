"""Celery application of the integration suite; mirrors ``project/celery.py``.

celery -A tests.integration.celery_app worker -Q durable,alpha
celery -A tests.integration.celery_app beat
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_ready

from durable.transports.celery import configure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.integration.settings")

app = Celery("durable_it")
app.config_from_object("django.conf:settings", namespace="CELERY")
configure(app)
app.autodiscover_tasks()


@worker_ready.connect
def _announce_ready(**_: Any) -> None:
    """Tell the test that started us that we consume our queues (it polls this file)."""
    path = os.environ.get("DURABLE_IT_READY_FILE")
    if path:
        Path(path).write_text(str(os.getpid()))
