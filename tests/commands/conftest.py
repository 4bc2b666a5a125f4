"""Fixtures of the command tests: the dashboard's workflows and run makers, and a command runner."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.dashboard.conftest import make_run  # noqa: F401  (a fixture)


@dataclass
class Result:
    out: str
    code: int
    error: str = ""


@pytest.fixture
def run_cmd(db) -> Callable[..., Result]:
    """Call a command; its output and exit code (the ``returncode`` of a ``CommandError``, else 0)."""

    def run(*args: str, stdin: str | None = None) -> Result:
        out = io.StringIO()
        extra = {"stdin": io.StringIO(stdin)} if stdin is not None else {}
        try:
            call_command(*args, stdout=out, **extra)
        except CommandError as exc:
            return Result(out.getvalue(), exc.returncode, str(exc))
        return Result(out.getvalue(), 0)

    return run
