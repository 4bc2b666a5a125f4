"""Settings of the Celery worker (and beat) subprocesses of the integration suite.

The test settings, plus the integration workflows app, the Celery transport on
our own Redis database (keys prefixed per test session) and the short leases of :mod:`tests.integration.common`.
``DATABASE_URL`` (set by the fixture to the test database) picks the database.
"""

from tests.integration.common import broker_url, durable_settings, transport_options
from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.integration.apps.IntegrationConfig"]
CELERY_BROKER_URL = broker_url()
CELERY_BROKER_TRANSPORT_OPTIONS = transport_options()
DURABLE = durable_settings()
