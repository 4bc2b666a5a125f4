"""Migration 0019: the open steps of limited queues take their run's priority; other checkpoints keep 0.

Steps written waiting before the upgrade are then ranked by the admission's
index as the runs' priorities say, exactly as the steps written after it.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.migration_steps import migrate, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("durable", "0018_waiter_and_lease_indexes")]
AFTER = [("durable", "0019_queue_backlog_priority")]


def test_open_queue_steps_take_their_runs_priority_and_the_rest_keep_zero():
    apps = migrate(BEFORE)
    try:
        run_model, cp_model = apps.get_model("durable", "Run"), apps.get_model("durable", "Checkpoint")
        at = timezone.now()
        run_model.objects.create(id="hi", workflow="wf", status="suspended", priority=7, created_at=at, updated_at=at)
        common = {"run_id": "hi", "name": "work", "kind": "step", "queue": "q", "enqueued_at": at}
        cp_model.objects.create(seq=1, status="pending", admission="waiting", **common)
        cp_model.objects.create(seq=2, status="running", admission="admitted", **common)
        cp_model.objects.create(seq=3, status="completed", admission="admitted", **common)
        cp_model.objects.create(seq=4, status="pending", **common)  # a step of a queue without limits
        apps = migrate(AFTER)
        rows = apps.get_model("durable", "Checkpoint").objects.order_by("seq").values_list("seq", "priority")
        assert list(rows) == [(1, 7), (2, 7), (3, 0), (4, 0)]
    finally:
        migrate_to_latest()
