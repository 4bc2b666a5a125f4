"""Real ``durable_worker`` subprocesses for the fleet tests, on the test database.

One way to spawn, wait on and stop them: each worker runs ``manage.py
durable_worker --interval 0.5`` with the settings module a test names (so its
workflows are registered), on the test's own PostgreSQL database, and writes
its output to ``<tmp>/<tag>.out``. :func:`until` waits for a state of the
database with a generous bound (a bound on waiting for an event, never a
measured threshold).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from django.conf import settings

REPO = Path(__file__).resolve().parent.parent


def database_url() -> str:
    """The URL of the database the tests run on (the test database, once pytest-django created it)."""
    db = settings.DATABASES["default"]
    auth = quote(db["USER"] or "postgres") + (":" + quote(db["PASSWORD"]) if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def spawn_worker(
    tmp: Path, tag: str, settings_module: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``durable_worker`` with ``settings_module`` and extra ``args``; its output goes to ``tmp/<tag>.out``."""
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings_module,
        "DATABASE_URL": database_url(),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    with (tmp / f"{tag}.out").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "durable_worker", "--interval", "0.5", *args],
            cwd=REPO,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Wait until ``condition()`` holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the worker drains and retires its advertisement), SIGKILL after 60 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def logs(tmp: Path, tags: list[str]) -> str:
    """The last lines each worker wrote (for assertion messages)."""
    return "\n".join((tmp / f"{tag}.out").read_text(errors="replace")[-2000:] for tag in tags)
