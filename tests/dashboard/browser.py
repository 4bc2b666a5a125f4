"""Driving Debian's ``chromium`` through Playwright for the browser tests (nothing is downloaded).

``.ci/run`` installs chromium with ``apt-get install -y chromium``; without it a test skips,
or fails under ``CI=true``. Screenshots go to ``test-output/``.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
DESKTOP = {"width": 1400, "height": 1000}
PHONE = {"width": 390, "height": 844}


def launch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A headless chromium for one test; closes the test's database connections afterwards."""
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs it with apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test itself are safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    OUTPUT.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            # The test's own queries ran while Playwright's loop was current, on connections
            # pytest-django does not close; close them so the test database can be dropped.
            connections.close_all()
            chromium.close()
    _wait_for_request_threads()


def new_page(chromium: Any, viewport: dict[str, int], **options: Any) -> Any:
    page = chromium.new_page(viewport=viewport, **options)
    page.set_default_timeout(60_000)  # a deadline for a stuck page, not a measure of a slow one
    return page


def _wait_for_request_threads(timeout: float = 10.0) -> None:
    """Let the live server's keep-alive request threads end (and close their database connections)."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if "process_request_thread" in thread.name:
            thread.join(max(deadline - time.monotonic(), 0))
