"""Lifecycle events: workflows started when other workflows complete or fail."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.dispatch import receiver

import durable
from durable import signals
from durable import worker as sweeps
from durable.engine import lifecycle
from durable.models import LifecycleBatch, Run
from durable.runtime import get_engine, registry
from durable.testing import drive, fake_clock, run_until_settled
from tests.threads import SETTLE

pytestmark = pytest.mark.django_db

seen: Counter[str] = Counter()
knobs: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _reset():
    seen.clear()
    knobs.clear()


@durable.workflow(name="checkout")
def checkout(ctx, order):
    if order.get("fail"):
        raise ValueError("card declined")
    return {"order": order["id"], "total": order.get("total", 0)}


@durable.workflow(name="l_receipt", on_event=["run.completed:checkout"])
def l_receipt(ctx, event):
    seen["receipt"] += 1
    return {"receipt_for": event["run_id"], "total": event["output"]["total"]}


@durable.workflow(
    name="l_big_spender",
    on_event=["run.completed:checkout"],
    where=lambda ev: ev["output"]["total"] >= 100,
    input=lambda ev: {"order": ev["output"]["order"]},
)
def l_big_spender(ctx, data):
    return data


@durable.workflow(
    name="l_dunning", on_event=["run.failed:checkout"], where=lambda ev: knobs["boom"] if knobs.get("explode") else True
)
def l_dunning(ctx, event):
    return event["error"]["message"]


@durable.workflow(name="l_digest", on_event=["run.completed:checkout"], batch=(3, "1h"), input=lambda ev: ev["run_id"])
def l_digest(ctx, run_ids):
    return sorted(run_ids)


@durable.workflow(name="l_quiet", on_event=["run.completed:checkout"], debounce="30s", input=lambda ev: ev["run_id"])
def l_quiet(ctx, last):
    return last


def lifecycle_of(run_id: str) -> dict[str, Any]:
    return Run.objects.get(id=run_id).lifecycle


def test_terminal_write_records_whom_the_event_is_owed_to(monkeypatch):
    # The process "dies" right after the terminal write: nothing is published live.
    monkeypatch.setattr(lifecycle, "publish", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("killed")))
    run_id = durable.start(checkout, {"id": "o1", "total": 5})
    get_engine().run_turn(run_id)
    row = Run.objects.get(id=run_id)
    assert row.status == "completed"
    assert row.lifecycle_owed is True
    assert row.lifecycle == {"owed": ["l_big_spender", "l_digest", "l_quiet", "l_receipt"]}


def test_sweep_delivers_what_a_dead_publisher_left_owed_exactly_once(monkeypatch):
    real = lifecycle.publish
    monkeypatch.setattr(lifecycle, "publish", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("killed")))
    with fake_clock() as fc:
        run_id = durable.start(checkout, {"id": "o2", "total": 5})
        get_engine().run_turn(run_id)
        monkeypatch.setattr(lifecycle, "publish", real)
        assert sweeps.publish_lifecycle(get_engine())["published"] == 0  # within the grace
        fc.advance("3s")
        assert sweeps.publish_lifecycle(get_engine())["published"] == 3  # receipt, digest, quiet
        assert sweeps.publish_lifecycle(get_engine())["published"] == 0
    row = Run.objects.get(id=run_id)
    assert row.lifecycle_owed is False
    assert row.lifecycle["started"] == {"l_receipt": f"{run_id}:completed:l_receipt"}
    assert row.lifecycle["skipped"] == ["l_big_spender"]
    assert Run.objects.filter(workflow="l_receipt").count() == 1


def test_live_publish_starts_subscribers_with_where_and_input_mapping():
    small = run_until_settled(durable.start(checkout, {"id": "s", "total": 5}))
    big = run_until_settled(durable.start(checkout, {"id": "b", "total": 500}))
    receipt = run_until_settled(f"{small.id}:completed:l_receipt")
    assert receipt.output == {"receipt_for": small.id, "total": 5}
    assert not Run.objects.filter(id=f"{small.id}:completed:l_big_spender").exists()
    spender = run_until_settled(f"{big.id}:completed:l_big_spender")
    assert spender.input == {"order": "b"} and spender.output == {"order": "b"}
    assert lifecycle_of(big.id)["started"]["l_big_spender"] == spender.id
    assert Run.objects.get(id=spender.id).search_attributes == {"source_run": big.id}


def test_failed_run_publishes_run_failed():
    src = run_until_settled(durable.start(checkout, {"id": "f", "fail": True}))
    assert src.status == "failed"
    dunning = run_until_settled(f"{src.id}:failed:l_dunning")
    assert dunning.output == "card declined"
    assert not Run.objects.filter(workflow="l_receipt").exists()


def test_raising_where_is_recorded_and_retried_only_by_republish():
    knobs["explode"] = True
    src = run_until_settled(durable.start(checkout, {"id": "x", "fail": True}))
    record = lifecycle_of(src.id)
    assert "where raised KeyError" in record["failed"]["l_dunning"]
    assert record["owed"] == []
    drive()
    assert not Run.objects.filter(workflow="l_dunning").exists()
    knobs.clear()
    report = durable.republish(src.id)
    assert report == {src.id: {"l_dunning": "started"}}
    assert "l_dunning" not in lifecycle_of(src.id)["failed"]
    assert run_until_settled(f"{src.id}:failed:l_dunning").status == "completed"
    # Republishing again starts nothing twice.
    durable.republish(src.id)
    assert Run.objects.filter(workflow="l_dunning").count() == 1


def test_refused_input_is_recorded_as_failed():
    @durable.workflow(name="l_picky", on_event=["run.completed:checkout"], validate=lambda v: int("nope"))
    def picky(ctx, event):
        return 1

    try:
        src = run_until_settled(durable.start(checkout, {"id": "p", "total": 1}))
        assert lifecycle_of(src.id)["failed"]["l_picky"].startswith("input refused")
        assert not Run.objects.filter(workflow="l_picky").exists()
    finally:
        registry.remove("l_picky")


def test_republish_reports_subscribers_that_do_not_take_that_ending():
    src = run_until_settled(durable.start(checkout, {"id": "n", "total": 1}))
    report = durable.republish(src.id, subscriber="l_dunning")
    assert report == {src.id: {"l_dunning": "not_subscribed"}}
    assert "l_dunning" not in str(lifecycle_of(src.id))


def test_subscriber_registered_after_the_source_settled_is_healed():
    src = run_until_settled(durable.start(checkout, {"id": "h", "total": 1}))

    @durable.workflow(name="l_late", on_event=["run.completed:checkout"])
    def late(ctx, event):
        return "late but there"

    try:
        assert sweeps.heal_lifecycle(get_engine()) == 1
        assert run_until_settled(f"{src.id}:completed:l_late").output == "late but there"
        assert sweeps.heal_lifecycle(get_engine()) == 0
    finally:
        registry.remove("l_late")


def test_batch_collects_events_into_one_run():
    ids = [run_until_settled(durable.start(checkout, {"id": f"b{i}", "total": 1})).id for i in range(4)]
    batch_runs = Run.objects.filter(workflow="l_digest")
    assert batch_runs.count() == 1  # fired when the third event arrived
    digest = run_until_settled(batch_runs.get().id)
    assert digest.output == sorted(ids[:3])
    assert LifecycleBatch.objects.get(subscriber="l_digest").source_ids == [ids[3]]


def test_batch_window_fires_a_partial_batch():
    with fake_clock() as fc:
        one = run_until_settled(durable.start(checkout, {"id": "w1", "total": 1})).id
        fc.advance("59m")
        drive()
        assert not Run.objects.filter(workflow="l_digest").exists()
        fc.advance("1m")
        drive()
        digest = Run.objects.get(workflow="l_digest")
    assert run_until_settled(digest.id).output == [one]


def test_debounce_starts_one_run_with_the_last_event_once_quiet():
    with fake_clock() as fc:
        first = run_until_settled(durable.start(checkout, {"id": "d1", "total": 1})).id
        fc.advance("20s")
        second = run_until_settled(durable.start(checkout, {"id": "d2", "total": 1})).id
        fc.advance("20s")
        drive()
        assert not Run.objects.filter(workflow="l_quiet").exists()  # not quiet for 30s yet
        fc.advance("10s")
        drive()
        quiet = Run.objects.get(workflow="l_quiet")
    assert run_until_settled(quiet.id).output == second
    assert first != second


def test_django_signals_fire_after_commit():
    got: list[tuple[str, str]] = []

    @receiver(signals.run_completed)
    def on_completed(sender, run, **kwargs):
        got.append(("completed", run.id))

    @receiver(signals.lifecycle_delivered)
    def on_delivered(sender, source, subscriber, outcome, **kwargs):
        got.append((subscriber, outcome))

    try:
        src = run_until_settled(durable.start(checkout, {"id": "sig", "total": 1}))
    finally:
        signals.run_completed.disconnect(on_completed)
        signals.lifecycle_delivered.disconnect(on_delivered)
    assert ("completed", src.id) in got
    assert ("l_receipt", "started") in got and ("l_big_spender", "skipped") in got


def test_republish_command(capsys):
    src = run_until_settled(durable.start(checkout, {"id": "cmd", "total": 1}))
    call_command("durable_republish", "--run", src.id, "--subscriber", "l_receipt")
    assert f"{src.id}  l_receipt: started" in capsys.readouterr().out
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="choose runs"):
        call_command("durable_republish")
    with pytest.raises(CommandError, match="timezone"):
        call_command("durable_republish", "--since", "2026-01-01T00:00")
    with pytest.raises(CommandError, match="no run"):
        call_command("durable_republish", "--run", "missing")


def test_lifecycle_event_names_are_reserved_for_the_engine():
    with pytest.raises(durable.InvalidInput, match="lifecycle"):
        durable.publish_event("run.completed:checkout", {})


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_publishers_start_each_subscriber_once(monkeypatch):
    monkeypatch.setattr(lifecycle, "publish", lambda *a, **k: {})
    src = durable.start(checkout, {"id": "race", "total": 1})
    get_engine().run_turn(src)
    monkeypatch.undo()
    barrier = threading.Barrier(6)

    def publisher():
        try:
            barrier.wait(SETTLE)
            for _ in range(5):
                lifecycle.publish(get_engine(), src)
        finally:
            connection.close()

    threads = [threading.Thread(target=publisher) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * SETTLE)
    assert not any(t.is_alive() for t in threads), "a publisher hung"
    assert Run.objects.filter(workflow="l_receipt").count() == 1
    assert LifecycleBatch.objects.get(subscriber="l_digest").source_ids == [src]
    row = Run.objects.get(id=src)
    assert row.lifecycle_owed is False and row.locked_by is None


def test_admin_run_detail_shows_triggered_and_owed(admin_client):
    src = run_until_settled(durable.start(checkout, {"id": "adm", "total": 1}))
    Run.objects.filter(id=src.id).update(
        lifecycle={**lifecycle_of(src.id), "owed": ["l_elsewhere"], "failed": {"l_dunning": "where raised X"}}
    )
    page = admin_client.get(f"/admin/durable/run/{src.id}/change/").content.decode()
    assert "Lifecycle events" in page
    assert "l_receipt → " in page and f"{src.id}:completed:l_receipt" in page
    assert "Still owed: l_elsewhere" in page
    assert "Failed for l_dunning: where raised X" in page
    assert "Its completion starts: l_big_spender, l_digest, l_quiet, l_receipt" in page
    sub = admin_client.get(f"/admin/durable/run/{src.id}:completed:l_receipt/change/").content.decode()
    assert "This workflow is started by: run.completed:checkout" in sub
