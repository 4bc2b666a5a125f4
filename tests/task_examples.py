"""Tasks written as Django's Tasks documentation writes them, run on the durable backend.

Module-level, as the Tasks framework requires. The test settings name
``durable.tasks_backend.DurableBackend`` as the default backend (with the
queues ``default`` and ``emails``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.mail import send_mail

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]

from durable.tasks_backend import retries

# Attempt numbers seen by context-taking tasks, and executions of flaky ones.
SEEN: list[int] = []


@task
def email_users(emails: list[str], subject: str, message: str) -> int:
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(takes_context=True)
def email_users_with_context(context: Any, emails: list[str], subject: str, message: str) -> int:
    SEEN.append(context.attempt)
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(priority=10, queue_name="emails")
def urgent_email(address: str) -> int:
    return send_mail(subject="urgent", message="now", from_email=None, recipient_list=[address])


class Flaky(Exception):
    """Raised by :func:`flaky` until its file holds ``succeed_after`` lines."""


@task
@retries(2)
def flaky(marker: str, succeed_after: int) -> str:
    path = Path(marker)
    with path.open("a") as f:
        f.write("x\n")
    runs = len(path.read_text().splitlines())
    if runs < succeed_after:
        raise Flaky(f"attempt {runs} fails")
    return f"ok after {runs}"


@task
def add(a: int, b: int) -> int:
    return a + b


@task
@retries(1)  # the kill of its worker costs an attempt
def blocking(log: str, release: str) -> str:
    """Record an execution, then wait (bounded) until the test creates ``release``."""
    import time

    with open(log, "a") as f:
        f.write("run\n")
    deadline = time.monotonic() + 120
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return "released"


def double(x: int) -> int:
    """Not a task here: tests/test_tasks_backend.py makes one of it with ``task(retries=...)``."""
    return 2 * x
