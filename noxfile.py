"""Supported versions, one nox session per combination: ``nox -l`` lists them.

The main combination (the pins of requirements.txt: Python 3.11, Django 5.2 LTS)
runs the whole suite through ./scripts/test. The others (``nox -s compat``) run
the engine, store and dashboard tests on SQLite, without the PostgreSQL-only,
browser and process-starting tests, to stay inside CI's time budget.

Interpreters are looked up as ``python3.X`` on PATH; on a machine with pyenv,
``.ci/run`` puts every installed ``3.11``-``3.13`` on PATH first.
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["compat"]

# Django 6 needs Python 3.12 or newer.
MATRIX = [
    ("3.11", "5.2"),
    ("3.12", "5.2"),
    ("3.12", "6.0"),
    ("3.12", "6.1"),
    ("3.13", "5.2"),
    ("3.13", "6.0"),
    ("3.13", "6.1"),
]
MAIN = ("3.11", "5.2")
COMPAT_ARGS = [
    "-m",
    "not postgres and not slow",
    "--ignore=tests/dashboard/test_browser.py",
    "--ignore=tests/dashboard/test_schema_fuzz.py",
    "-p",
    "no:cacheprovider",
]


def _install(session: nox.Session, django: str) -> None:
    """The pinned requirements, with Django replaced by the newest release of ``django``."""
    pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if not line.startswith("Django==")]
    wanted = Path(session.create_tmp()) / "requirements.txt"
    wanted.write_text("\n".join([*pins, f"Django~={django}.0"]) + "\n")
    session.install("-r", str(wanted), "-r", str(ROOT / "requirements-dev.txt"))


def _pytest(session: nox.Session, args: list[str]) -> None:
    db = Path(session.create_tmp()) / "db.sqlite3"
    session.run("python", "-m", "pytest", *args, *session.posargs, env={"DATABASE_URL": f"sqlite:///{db}"})


@nox.session(name="tests")
@nox.parametrize(("python", "django"), MATRIX, ids=[f"py{p}-django{d}" for p, d in MATRIX])
def tests(session: nox.Session, django: str) -> None:
    """One combination: the main one runs the whole SQLite suite, the others the contract tests."""
    session.run("python", "-c", "import sys; print(sys.version)")
    _install(session, django)
    session.run("python", "-c", "import django; print('Django', django.__version__)")
    args = ["-m", "not postgres", "-p", "no:cacheprovider"] if (session.python, django) == MAIN else COMPAT_ARGS
    _pytest(session, args)


@nox.session(name="compat", python=False)
def compat(session: nox.Session) -> None:
    """Every combination but the main one (CI runs the main one through ./scripts/test)."""
    for python, django in MATRIX:
        if (python, django) != MAIN:
            session.notify(f"tests(py{python}-django{django})")
