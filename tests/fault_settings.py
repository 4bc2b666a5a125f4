"""Settings for ``manage.py durable_worker`` subprocesses started by tests/test_faults.py.

The test settings, plus the fault-suite workflows and a fast idle poll. The
lease stays as in the test settings: tests move past it with a fake clock in
the test process instead of waiting for it. ``$DURABLE_FAULT_OPTIONS`` (JSON)
adds DURABLE options of one test's workers.
"""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DURABLE, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.fault_apps.FaultWorkflowsConfig"]
DURABLE = {**DURABLE, "WORKER_INTERVAL": 0.05, **json.loads(os.environ.get("DURABLE_FAULT_OPTIONS") or "{}")}
