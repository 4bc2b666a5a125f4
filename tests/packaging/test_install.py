"""The real install path: build the wheel, install it into a fresh virtualenv, use it in a new project.

Nothing from the checkout is on ``sys.path`` in the new project: it runs in a
temporary directory with the fresh virtualenv's interpreter, so only what the
wheel installed can be imported.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SETTINGS_TAIL = """
INSTALLED_APPS += [
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "durable",
    "durable_dashboard",
    "shop",
]
# No REST_FRAMEWORK and no SPECTACULAR_SETTINGS: the dashboard brings its own policy.
DURABLE = {"TRANSPORT": "manual"}
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/durable/", include("durable_dashboard.urls")),
]
"""

WORKFLOWS = """
import durable


@durable.step
def add(a, b):
    return a + b


@durable.workflow
def flow(ctx, data):
    total = ctx.step(add, data["a"], data["b"])
    ctx.sleep("1h")
    got = ctx.wait_signal("go")
    return {"total": total, "got": got}
"""

SCENARIO = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
import django
django.setup()
from django.test.utils import setup_test_environment
setup_test_environment()
from django.contrib.auth.models import User
from django.test import Client
import durable
from durable.testing import fake_clock, run_until_settled
from shop.workflows import flow

# The checkout itself is not importable here (a temporary directory may still lie below it).
assert not any(os.path.realpath(p) == os.path.realpath(sys.argv[1]) for p in sys.path if p), sys.path
report = {"durable_file": durable.__file__}
with fake_clock() as clock:
    run_id = durable.start(flow, {"a": 1, "b": 2}, run_id="pkg-1")
    report["after_start"] = run_until_settled(run_id).status
    clock.advance("1h")
    report["after_sleep"] = run_until_settled(run_id).status
    durable.signal(run_id, "go", "yes")
    run = run_until_settled(run_id)
    report["final"] = run.status
    report["output"] = run.output
user = User.objects.create_superuser("admin", "admin@example.com", "admin")
client = Client()
client.force_login(user)
page = client.get("/admin/durable/run/")
report["admin_status"] = page.status_code
report["admin_lists_run"] = "pkg-1" in page.content.decode()
api = client.get("/api/durable/runs/")
report["api_status"] = api.status_code
report["api_ids"] = [r["id"] for r in api.json()["results"]]
schema = client.get("/api/durable/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
report["schema_status"] = schema.status_code
report["schema_title"] = json.loads(schema.content)["info"]["title"] if schema.status_code == 200 else None
bad = client.post("/api/durable/runs/", {"workflow": "nope"}, content_type="application/json")
report["bad_start"] = [bad.status_code, bad.json().get("code")]
from django.core.management import call_command
from io import StringIO
out = StringIO()
call_command("check", stdout=out, stderr=out)
report["check"] = out.getvalue().strip()
print("REPORT " + json.dumps(report))
"""


# An install into a new virtualenv resolves against the package index: on a loaded machine with
# a slow index that alone has taken most of pytest's default 120 s, so these tests get their own.
INSTALL_TIMEOUT = 900


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """Run ``cmd`` to completion; a failure, or a run past ``timeout`` seconds, fails with its output."""
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        out, err = (
            x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (expired.stdout, expired.stderr)
        )
        pytest.fail(f"{cmd} still running after {timeout} s:\n{out}\n{err}")
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# What a build must not see: setuptools reuses build/ (a file removed from the tree would still
# ship) and writes an egg-info beside pyproject.toml (through which pytest finds the plugin).
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".docs-venv", ".nox", "build", "dist", "site", "test-output", "*.egg-info", "__pycache__",
    "node_modules",
)  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the work tree (uncommitted changes included), leaving the tree as it was."""
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "django-durable"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, ignore_dangling_symlinks=True, symlinks=True)
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)], cwd=source)
    (found,) = out.glob("django_durable-*.whl")
    return found


def test_the_wheel_holds_exactly_the_two_apps_with_their_files(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"durable", "durable_dashboard"}
    assert "durable/py.typed" in names and "durable_dashboard/py.typed" in names
    assert any(n.startswith("durable/migrations/0001_") for n in names)
    assert any(n.startswith("durable_dashboard/templates/durable_dashboard/admin/") for n in names)
    assert any(n.startswith("durable_dashboard/static/durable_dashboard/") for n in names)
    assert "durable_dashboard/static/durable_dashboard/live.js" in names
    assert "durable_dashboard/locale/en/LC_MESSAGES/django.po" in names  # the extracted admin strings
    points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    # The test kit's fixtures reach a user's pytest through this entry point.
    assert "[pytest11]\ndurable = durable.pytest_plugin" in zipfile.ZipFile(wheel).read(points).decode()
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    # Ranges, not pins; the test and lint tools are no dependency at all.
    assert not any("==" in line.split(";")[0] for line in requires), requires
    assert not any(tool in line for line in requires for tool in ("pytest", "ruff", "mypy", "playwright"))


@pytest.mark.timeout(INSTALL_TIMEOUT)
def test_a_new_project_runs_a_workflow_from_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # The example project's pins as constraints (pip takes no extras there), so the versions are known ones.
    pins = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(re.sub(r"\[.*?\]", "", pin) for pin in pins if pin))
    _run([*pip, f"{wheel}[dashboard]", "-c", str(constraints)], cwd=tmp_path)
    installed = {p["name"].lower() for p in json.loads(_run([python, "-m", "pip", "list", "--format=json"], tmp_path))}
    assert {"django", "django-durable", "djangorestframework"} <= installed
    assert not installed & {"pytest", "pytest-django", "ruff", "mypy", "playwright", "schemathesis"}

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    _run([str(venv / "bin" / "django-admin"), "startproject", "mysite", "."], cwd=tmp_path, env=env)
    _run([python, "manage.py", "startapp", "shop"], cwd=tmp_path, env=env)
    with open(tmp_path / "mysite" / "settings.py", "a") as f:
        f.write(SETTINGS_TAIL)
    (tmp_path / "mysite" / "urls.py").write_text(URLS)
    (tmp_path / "shop" / "workflows.py").write_text(textwrap.dedent(WORKFLOWS))
    _run([python, "manage.py", "migrate", "--verbosity", "0"], cwd=tmp_path, env=env)
    (tmp_path / "scenario.py").write_text(SCENARIO)
    out = _run([python, "scenario.py", str(ROOT)], cwd=tmp_path, env=env)
    report = json.loads(out.split("REPORT ", 1)[1])

    assert report["durable_file"].startswith(str(venv))
    assert (report["after_start"], report["after_sleep"], report["final"]) == ("suspended", "suspended", "completed")
    assert report["output"] == {"total": 3, "got": "yes"}
    assert report["admin_status"] == 200 and report["admin_lists_run"]
    assert report["api_status"] == 200 and report["api_ids"] == ["pkg-1"]
    assert (report["schema_status"], report["schema_title"]) == (200, "django-durable API")
    assert report["bad_start"] == [400, "workflow_not_found"], report
    # drf_spectacular_sidecar is not installed here: the docs page would load Swagger UI from the internet.
    assert "durable_dashboard.W002" in report["check"]
