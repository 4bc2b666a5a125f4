"""Settings for the test suite: the example project, with the manual transport.

``DATABASE_URL`` picks the database (``scripts/test`` sets it to PostgreSQL
when reachable); the default is a SQLite file so threads and subprocesses
share it.
"""

from project.settings import *  # noqa: F403
from project.settings import BASE_DIR, DATABASES

DURABLE = {"TRANSPORT": "manual", "LEASE": 30}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["NAME"] = str(BASE_DIR / "test-output" / "db.sqlite3")
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "test-output" / "test-db.sqlite3")}

# Django's Tasks framework (the backport on Django 5.2) on the durable backend; tests/test_tasks_backend.py.
TASKS = {
    "default": {
        "BACKEND": "durable.tasks_backend.DurableBackend",
        "QUEUES": ["default", "emails"],
    }
}
