"""Settings of the chaos suite's processes: its driver, Celery workers, beat and ``durable_worker``.

The integration suite's settings (Celery on Redis, keys prefixed per session) plus the
chaos workflows app, on the suite's own PostgreSQL cluster and redis-server (the driver
puts their URLs into ``DATABASE_URL`` and ``DURABLE_IT_BROKER_URL``). Leases are short so a
killed process's work comes back within seconds; ``STEP_LEASE`` is left at its default,
so the suite tests what a deployment without tuning gets.
"""

import json
import os

from tests.integration.common import SETTINGS_ENV
from tests.integration.settings import *  # noqa: F403
from tests.integration.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.chaos.apps.ChaosConfig"]

# LEASE               a turn's run lease: a killed turn's run is recovered this long after;
# STEP_EXECUTION_LEASE  a running step's lease: a killed step runs again this long after.
CHAOS_DURABLE = {
    "TRANSPORT": "celery",
    "LEASE": "6s",
    "STEP_EXECUTION_LEASE": "6s",
    "HEARTBEAT_INTERVAL": "1s",
    "WORKER_INTERVAL": "0.5s",
    "WORKER_THREADS": 2,
}
DURABLE = {**CHAOS_DURABLE, **json.loads(os.environ.get(SETTINGS_ENV) or "{}")}
