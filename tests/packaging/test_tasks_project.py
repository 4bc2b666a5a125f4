"""A workflow-free project on Django 6: only ``TASKS`` names the durable backend, and tasks are durable.

The wheel is installed into a fresh Python 3.12 virtualenv with Django 6.1, in
a new ``django-admin startproject`` whose only durable setting is ``TASKS``
(plus ``DURABLE = {"TRANSPORT": "manual"}`` on the web side, as the deployment
docs say for web processes: with the default ``inline`` transport the web
process would run the task in its own threads and wait for it at exit). A view
enqueues a task; a ``durable_worker`` starts it and
is killed with SIGKILL mid-task; once its execution lease has run out (moved
into the past here rather than waited for), the lost attempt counts as a failed
one (the task has one retry), a second worker runs the task to completion, and
``get_result()`` reads it back: successful, two attempts, the lost one's error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.packaging.test_install import INSTALL_TIMEOUT, ROOT, _run, wheel  # noqa: F401  (the wheel fixture)

pytestmark = pytest.mark.slow

SETTINGS_TAIL = """
import os

INSTALLED_APPS += ["durable", "mail"]
TASKS = {"default": {"BACKEND": "durable.tasks_backend.DurableBackend", "OPTIONS": {"retries": 1}}}
if os.environ.get("WEB_PROCESS"):
    DURABLE = {"TRANSPORT": "manual"}
"""

TASKS = """
import time
from pathlib import Path

from django.tasks import task


@task
def send(marker, release):
    with open(marker, "a") as f:
        f.write("run\\n")
    deadline = time.monotonic() + 120
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return "sent"
"""

VIEWS = """
from django.http import JsonResponse

from mail.tasks import send


def enqueue(request):
    result = send.enqueue(request.GET["marker"], request.GET["release"])
    return JsonResponse({"id": result.id, "status": str(result.status)})
"""

URLS = """
from django.urls import path

from mail.views import enqueue

urlpatterns = [path("enqueue/", enqueue)]
"""

SCRIPT = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
from mail.tasks import send

action = sys.argv[1]
if action == "enqueue":
    setup_test_environment()
    r = Client().get("/enqueue/", {"marker": sys.argv[2], "release": sys.argv[3]})
    print("OUT " + r.content.decode())
elif action == "lapse":
    from datetime import timedelta
    from durable.models import Checkpoint
    step = Checkpoint.objects.get(run_id=sys.argv[2], kind="step")
    Checkpoint.objects.filter(pk=step.pk).update(wake_at=step.started_at - timedelta(seconds=1))
    print("OUT " + json.dumps([step.status, step.attempts]))
else:
    result = send.get_result(sys.argv[2])
    value = result.return_value if str(result.status) == "SUCCESSFUL" else None
    print("OUT " + json.dumps([str(result.status), value, result.attempts, len(result.errors)]))
"""


def _python312() -> str:
    """A Python 3.12 interpreter (Django 6 needs it): pyenv's, else one on PATH."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob("3.12.*/bin/python3.12")) if pyenv.exists() else []
    if candidates:
        return str(candidates[-1])
    found = shutil.which("python3.12")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    pytest.fail("Django 6 needs Python 3.12: no python3.12 interpreter found (pyenv or PATH)")


def _out(text: str) -> object:
    return json.loads(text.split("OUT ", 1)[1])


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait(predicate: object, what: str, worker: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline or worker.poll() is not None:
            pytest.fail(f"timed out waiting for {what}\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


def _project(built: Path, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """The wheel in a new Python 3.12 virtualenv, a new project migrated in ``tmp_path``; its python and env."""
    venv = tmp_path / "venv"
    _run([_python312(), "-m", "venv", str(venv)], cwd=tmp_path)
    python = str(venv / "bin" / "python")
    pins = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(re.sub(r"\[.*?\]", "", p) for p in pins if p and not p.startswith("Django==")))
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, str(built), "Django~=6.1.0", "-c", str(constraints)], cwd=tmp_path)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    _run([str(venv / "bin" / "django-admin"), "startproject", "mysite", "."], cwd=tmp_path, env=env)
    _run([python, "manage.py", "startapp", "mail"], cwd=tmp_path, env=env)
    with open(tmp_path / "mysite" / "settings.py", "a") as f:
        f.write(SETTINGS_TAIL)
    (tmp_path / "mail" / "tasks.py").write_text(TASKS)
    (tmp_path / "mail" / "views.py").write_text(VIEWS)
    (tmp_path / "mysite" / "urls.py").write_text(URLS)
    (tmp_path / "script.py").write_text(SCRIPT)
    _run([python, "manage.py", "migrate", "--verbosity", "0"], cwd=tmp_path, env=env)
    return python, env


@pytest.mark.timeout(INSTALL_TIMEOUT)
def test_a_view_enqueues_a_task_that_survives_the_kill_of_its_worker(wheel: Path, tmp_path: Path) -> None:  # noqa: F811
    python, env = _project(wheel, tmp_path)
    web = {**env, "WEB_PROCESS": "1"}
    marker, release = tmp_path / "executions", tmp_path / "release"
    enqueued = _out(
        _run([python, "script.py", "enqueue", str(marker), str(release)], cwd=tmp_path, env=web, timeout=120)
    )
    assert isinstance(enqueued, dict) and enqueued["status"] == "READY"
    assert _lines(marker) == 0  # the web process only wrote the run
    result_id = enqueued["id"]

    def worker(name: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [python, "manage.py", "durable_worker", "--interval", "0.05"],
            cwd=tmp_path,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        return proc, log

    first, first_log = worker("first")
    try:
        _wait(lambda: _lines(marker) == 1, "the task to start on the first worker", first, first_log)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert _out(_run([python, "script.py", "lapse", result_id], cwd=tmp_path, env=web)) == ["running", 1]
    release.touch()

    second, second_log = worker("second")
    try:
        _wait(
            lambda: "SUCCESSFUL" in _run([python, "script.py", "result", result_id], cwd=tmp_path, env=web),
            "the task to finish on the second worker",
            second,
            second_log,
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    # The killed attempt is a failed one (its worker was lost): it used the task's one retry.
    assert _out(_run([python, "script.py", "result", result_id], cwd=tmp_path, env=web)) == ["SUCCESSFUL", "sent", 2, 1]
    assert _lines(marker) == 2  # at least once: the killed execution, then the one that finished
