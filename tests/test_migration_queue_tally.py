"""Migration 0023: a queue's row takes the time its steps without a key were last admitted.

The round robin then ranks an unkeyed group against keyed ones after the
upgrade exactly as it did before, though the served index keeps keyed steps only.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.migration_steps import migrate, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("durable", "0022_run_awaiting_steps")]
AFTER = [("durable", "0023_queue_admission_tally")]


def test_each_queue_row_takes_its_unkeyed_steps_latest_admission() -> None:
    apps = migrate(BEFORE)
    try:
        run_model, cp_model = apps.get_model("durable", "Run"), apps.get_model("durable", "Checkpoint")
        queue_model = apps.get_model("durable", "Queue")
        at = timezone.now()
        run_model.objects.create(id="r", workflow="wf", status="suspended", created_at=at, updated_at=at)
        for name in ("q", "keyed", "idle"):
            queue_model.objects.create(name=name, updated_at=at)
        common = {"run_id": "r", "name": "work", "kind": "step", "status": "completed", "admission": "admitted"}
        cp_model.objects.create(seq=1, queue="q", admitted_at=at, **common)
        cp_model.objects.create(seq=2, queue="q", admitted_at=at + timedelta(seconds=5), **common)
        cp_model.objects.create(seq=3, queue="q", queue_key="k", admitted_at=at + timedelta(seconds=9), **common)
        cp_model.objects.create(seq=4, queue="keyed", queue_key="k", admitted_at=at, **common)
        apps = migrate(AFTER)
        rows = apps.get_model("durable", "Queue").objects.order_by("name").values_list("name", "unkeyed_served_at")
        assert list(rows) == [("idle", None), ("keyed", None), ("q", at + timedelta(seconds=5))]
    finally:
        migrate_to_latest()
