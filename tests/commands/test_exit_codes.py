"""Exit codes from a real shell: bad arguments 2 (one line on stderr), an unknown run 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    db = tmp_path_factory.mktemp("cli") / "cli.sqlite3"
    values = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    values.update(DATABASE_URL=f"sqlite:///{db}", DJANGO_SETTINGS_MODULE="project.settings")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=values, check=True, timeout=300)
    return values


def _manage(env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["durable_runs", "--status", "sleepy"], 2, "unknown status 'sleepy'"),
        (["durable_runs", "--bogus"], 2, "unrecognized arguments: --bogus"),
        (["durable_cancel"], 2, "give a run id, or choose runs with filters"),
        (["durable_start", "dash_nothing", "--input", "{"], 2, "--input is not valid JSON"),
        (["durable_run", "missing-run"], 1, "no run with id 'missing-run'"),
        (["durable_cancel", "missing-run", "--reason", "test"], 1, "no run with id 'missing-run'"),
    ],
)
def test_exit_code_and_one_line(env, args, code, message):
    done = _manage(env, *args)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert message in lines[0]


@pytest.mark.slow
def test_listing_an_empty_database(env):
    done = _manage(env, "durable_runs")
    assert (done.returncode, done.stdout.strip()) == (0, "no runs match")
