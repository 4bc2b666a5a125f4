"""Settings for the ``manage.py durable_worker`` subprocesses of tests/test_notify_pickup.py."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.notify_workflows.NotifyWorkflowsConfig"]
