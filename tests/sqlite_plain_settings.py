"""A project on Django's plain SQLite settings (no OPTIONS at all), for tests/test_sqlite_concurrency.py.

``DURABLE_SQLITE_PATH`` names the database file; the inline transport runs
turns in each process's own threads, so several processes write at once.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["DURABLE_SQLITE_PATH"],
    }
}
INSTALLED_APPS = [*INSTALLED_APPS, "tests.sqlite_app"]
DURABLE = {"TRANSPORT": "inline", "EMBEDDED_WORKER": False}
