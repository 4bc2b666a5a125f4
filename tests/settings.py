"""Settings for the test suite: the example project, with the manual transport.

``DATABASE_URL`` picks the database (``scripts/test`` sets it to PostgreSQL
when reachable); the default is a SQLite file so threads and subprocesses
share it.
"""

import os
from pathlib import Path

from project.settings import *  # noqa: F403
from project.settings import BASE_DIR, DATABASES

DURABLE = {"TRANSPORT": "manual", "LEASE": 30}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file beside the one DATABASE_URL names (default test-output/db.sqlite3), so two suites
    # run at once with different DATABASE_URLs (CI's compat sessions) never share a test database.
    if not os.environ.get("DATABASE_URL"):
        DATABASES["default"]["NAME"] = str(BASE_DIR / "test-output" / "db.sqlite3")
    _db = Path(DATABASES["default"]["NAME"])
    DATABASES["default"]["TEST"] = {"NAME": str(_db.with_name(f"test-{_db.name}"))}

# Django's Tasks framework (the backport on Django 5.2) on the durable backend; tests/test_tasks_backend.py.
TASKS = {
    "default": {
        "BACKEND": "durable.tasks_backend.DurableBackend",
        "QUEUES": ["default", "emails"],
    }
}
