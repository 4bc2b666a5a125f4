"""The pytest plugin of the test kit (registered through the ``pytest11`` entry point ``durable``).

Fixtures, each a thin wrapper of :mod:`durable.testing`:

``durable_clock``
    a :class:`~durable.engine.clock.FakeClock` installed for the test (``fake_clock()``).
``durable_drive``
    the ``manual`` transport for the test (the other ``DURABLE`` settings kept), and a
    :class:`Driver`: ``durable_drive(run_id)`` runs it until settled, ``.tick()`` one pass.
``durable_replay``
    ``durable_replay(*run_ids)`` asserts each run replays against the current code
    (:func:`~durable.testing.assert_replayable`); with no id, every run in the database.

Nothing is imported from Django or durable until a fixture is used: pytest
loads the plugin before Django is set up (and in projects that do not use
it), so this module lives outside :mod:`durable.testing`, whose import needs
Django's settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


class Driver:
    """Drives runs in the test's thread (see :func:`durable.testing.run_until_settled`)."""

    def __call__(self, run_id: str, timeout: float = 10.0) -> Any:
        """Run ``run_id`` until it ends or waits on something not due; returns its RunInfo."""
        from durable.testing import run_until_settled

        return run_until_settled(run_id, timeout)

    def tick(self) -> dict[str, int]:
        """One pass of every sweep (``durable.testing.drive()``)."""
        from durable.testing import drive

        return drive()


@pytest.fixture
def durable_clock() -> Iterator[Any]:
    """A fake clock for the whole engine during the test."""
    from durable.testing import fake_clock

    with fake_clock() as clock:
        yield clock


@pytest.fixture
def durable_drive() -> Iterator[Driver]:
    """The ``manual`` transport for the test, and a :class:`Driver`."""
    from django.conf import settings
    from django.test import override_settings

    with override_settings(DURABLE={**getattr(settings, "DURABLE", {}), "TRANSPORT": "manual"}):
        yield Driver()


@pytest.fixture
def durable_replay() -> Any:
    """``durable_replay(*run_ids)``: each run (every run, with no id) replays against the current code."""
    from durable.testing import assert_replayable

    def check(*run_ids: str) -> int:
        if not run_ids:
            from durable.models import Run

            run_ids = tuple(Run.objects.values_list("id", flat=True))
        for run_id in run_ids:
            assert_replayable(run_id)
        return len(run_ids)

    return check
