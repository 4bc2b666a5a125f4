"""The README's testing example, as written there (the example project's order workflow)."""

from __future__ import annotations

import pytest

import durable
from durable.testing import assert_replayable, fake_clock, inject_crash, run_until_settled
from project.workflows import charge_card, order

pytestmark = pytest.mark.django_db


def test_charge_survives_a_crash():
    with fake_clock() as clock, inject_crash(charge_card) as crash:  # the step runs, then its process "dies"
        run_id = durable.start(order, {"order_id": "a1", "amount": 42, "address": "1 Main St"})
        while (run := run_until_settled(run_id)).status == "suspended":
            clock.advance("1m")  # past the retry's backoff, then the order's 3 s sleep
    assert run.status == "completed"
    assert_replayable(run_id)  # or a history exported with manage.py durable_export ID
    assert crash.hits == 1
