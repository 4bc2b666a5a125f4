"""The example project's defaults: DEBUG is off unless asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("value", "expected"), [(None, "False"), ("true", "True"), ("false", "False")])
def test_debug_is_off_unless_the_environment_turns_it_on(value: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    if value is not None:
        env["DEBUG"] = value
    out = subprocess.run(
        [sys.executable, "-c", "import project.settings as s; print(s.DEBUG)"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == expected
