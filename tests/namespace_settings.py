"""Settings for the ``manage.py durable_worker`` subprocesses of tests/test_namespace_fleet.py."""

from tests.settings import *  # noqa: F403
from tests.settings import DURABLE, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.namespace_workflows.NamespaceWorkflowsConfig"]
DURABLE = {**DURABLE, "WORKER_INTERVAL": 0.5}
