"""Celery application of the example project (used when CELERY_BROKER_URL is set).

    celery -A project worker -Q durable,durable.sweeps -c 2   # turns, default steps, sweeps
    celery -A project beat                                    # sends durable's sweeps
"""

import os

from celery import Celery

from durable.transports.celery import configure

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
configure(app)
app.autodiscover_tasks()
