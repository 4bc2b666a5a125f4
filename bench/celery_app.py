"""Celery application of the benchmark (durable's tasks plus the bare chain in ``bench.tasks``).

celery -A bench.celery_app worker -c 2 -Q durable,bench
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_ready

from durable.transports.celery import configure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

app = Celery("bench")
app.config_from_object("django.conf:settings", namespace="CELERY")
configure(app)
app.autodiscover_tasks()


@worker_ready.connect
def _ready(**_: Any) -> None:
    path = os.environ.get("BENCH_READY_FILE")
    if path:
        Path(path).write_text(str(os.getpid()))


@worker_process_init.connect
def _count_sql(**_: Any) -> None:
    from bench import sqlcount

    if sqlcount.enabled():
        sqlcount.install_django()
        sqlcount.start_flusher("durable")
