"""Debounce and batch on named-event subscriptions (``on_event=["name"]``), driven by the fake clock."""

from __future__ import annotations

from typing import Any

import pytest

import durable
from durable.models import LifecycleBatch, Run
from durable.testing import drive, fake_clock, run_until_settled

pytestmark = pytest.mark.django_db


@durable.workflow(name="e_reindex", on_event=["catalog.changed"], debounce="30s")
def e_reindex(ctx: Any, change: dict[str, Any]) -> Any:
    return change


@durable.workflow(name="e_digest", on_event=["batches.order.paid"], batch=(3, "1h"))
def e_digest(ctx: Any, orders: list[dict[str, Any]]) -> Any:
    return [order["id"] for order in orders]


@durable.workflow(name="e_receipt", on_event=["batches.order.paid"])
def e_receipt(ctx: Any, order: dict[str, Any]) -> Any:
    return order["id"]


def runs(workflow: str) -> list[Run]:
    return list(Run.objects.filter(workflow=workflow).order_by("created_at", "id"))


def test_debounce_starts_one_run_with_the_last_event_once_events_stop():
    with fake_clock() as clock:
        results = []
        for sku in ("a", "b", "c"):
            results.append(durable.publish_event("catalog.changed", {"sku": sku}))
            clock.advance("20s")
        assert [r.started for r in results] == [[], [], []]
        assert [r.coalesced for r in results] == [["e_reindex"]] * 3
        drive()
        assert runs("e_reindex") == []  # 20 s since the last event: not quiet for 30 s yet
        clock.advance("10s")
        drive()
        (run,) = runs("e_reindex")
    assert run_until_settled(run.id).output == {"sku": "c"}
    assert not LifecycleBatch.objects.exists()


def test_batch_starts_one_run_per_size_events_and_a_partial_one_when_its_window_ends():
    with fake_clock() as clock:
        results = [durable.publish_event("batches.order.paid", {"id": i}, id=f"paid-{i}") for i in range(4)]
        # The plain subscriber still gets one run per event; the batch one a run at the third.
        assert [len(r.started) for r in results] == [1, 1, 2, 1]
        assert len(runs("e_receipt")) == 4
        (full,) = runs("e_digest")
        assert full.id in results[2].started
        assert run_until_settled(full.id).output == [0, 1, 2]
        clock.advance("59m")
        drive()
        assert len(runs("e_digest")) == 1
        clock.advance("1m")
        drive()
        partial = runs("e_digest")[1]
    assert run_until_settled(partial.id).output == [3]


def test_an_event_published_twice_is_taken_into_a_batch_once():
    with fake_clock() as clock:
        durable.publish_event("batches.order.paid", {"id": 1}, id="same")
        again = durable.publish_event("batches.order.paid", {"id": 1}, id="same")
        assert again.duplicate and again.coalesced == [] and again.started == []
        clock.advance("1h")
        drive()
        (run,) = runs("e_digest")
    assert run_until_settled(run.id).output == [1]
