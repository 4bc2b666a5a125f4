"""Settings for the ``manage.py durable_worker`` subprocesses of tests/test_schedule_fleet.py.

The test settings plus the schedule tests' workflows, and a half-second idle poll.
"""

from tests.settings import *  # noqa: F403
from tests.settings import DURABLE, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.schedule_apps.ScheduleWorkflowsConfig"]
DURABLE = {**DURABLE, "WORKER_INTERVAL": 0.5}
