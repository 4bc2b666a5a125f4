"""Constants shared by the test process and the worker subprocesses (no Django import)."""

from __future__ import annotations

import json
import os
from typing import Any

# Our own Redis database, so other suites running on this machine are not disturbed.
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/7"
BROKER_ENV = "DURABLE_IT_BROKER_URL"
# One test session's keys and connections on that database: every key Celery
# writes is prefixed with it and every connection is named with it, so two
# sessions running at once (two engineers, or CI) neither steal each other's
# messages nor flush each other's queues.
SESSION_ENV = "DURABLE_IT_SESSION"

# Environment of worker subprocesses.
SETTINGS_ENV = "DURABLE_IT_SETTINGS"  # JSON: DURABLE options on top of BASE_DURABLE
LOG_ENV = "DURABLE_IT_LOG"  # file that steps append one JSON line per execution to
READY_ENV = "DURABLE_IT_READY_FILE"  # written by the worker once it consumes

# Leases no busy machine outlasts by accident: a live worker always keeps what it holds.
# A test that needs a lease to lapse (a killed worker's) says so: it writes the lease
# into the past (tests.integration.harness.lapse_*), then lets the sweeps find it.
# LEASE          a turn's run lease (renewed every LEASE/3 while the turn runs);
# STEP_EXECUTION_LEASE  a running step's lease (renewed by the worker's lease keeper
#                and by the step's heartbeats);
# STEP_LEASE     a dispatched step's lease until a worker claims it (lost-dispatch self-heal).
BASE_DURABLE: dict[str, Any] = {
    "TRANSPORT": "celery",
    "LEASE": "2m",
    "STEP_EXECUTION_LEASE": "2m",
    "STEP_LEASE": "2m",
    "HEARTBEAT_INTERVAL": "200ms",
}


def broker_url() -> str:
    return os.environ.get(BROKER_ENV) or DEFAULT_BROKER_URL


def session() -> str:
    return os.environ.get(SESSION_ENV) or "durable-it"


def transport_options() -> dict[str, Any]:
    """Kombu Redis options isolating this session (see SESSION_ENV)."""
    return {"global_keyprefix": f"{session()}:", "client_name": session()}


def durable_settings(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """BASE_DURABLE plus per-test options (from ``extra`` or the worker's environment)."""
    if extra is None:
        extra = json.loads(os.environ.get(SETTINGS_ENV) or "{}")
    return {**BASE_DURABLE, **extra}
