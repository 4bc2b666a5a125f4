"""The chaos suite brings its own PostgreSQL cluster and redis-server: it needs their binaries, not a server.

Without ``initdb`` or ``redis-server`` the suite is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import IN_CI


def _missing() -> list[str]:
    missing = []
    if not (shutil.which("initdb") or list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))):
        missing.append("initdb (PostgreSQL's server binaries)")
    if not shutil.which("redis-server"):
        missing.append("redis-server")
    return missing


@pytest.fixture(autouse=True)
def _require_services() -> None:
    """Replaces the suite-wide check: the chaos tests do not use the test database at all."""
    missing = _missing()
    if missing:
        message = f"the chaos suite needs {', '.join(missing)}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
