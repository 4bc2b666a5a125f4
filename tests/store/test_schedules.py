"""Schedule rows on every store: create, read, compare-and-set plans, and the due sweep."""

from __future__ import annotations

from typing import Any

from durable.engine.vocab import RunStatus
from durable.schedules.plan import SchedulePlan, new_row
from durable.schedules.spec import Schedule, ScheduleOrigin
from tests.store.conftest import T0, at, fields, running


def _row(store: Any, key: str, **spec: Any) -> None:
    assert store.create_schedule(
        new_row(key, "wf", Schedule(**(spec or {"every": "1m"})), ScheduleOrigin.RUNTIME, T0, code=False)
    )


def test_create_is_once_per_key_and_rows_read_back(store):
    _row(store, "b")
    _row(store, "a", cron="0 2 * * *", timezone="Europe/Lisbon", input={"x": [1]})
    assert not store.create_schedule(new_row("a", "wf", Schedule(every="1h"), ScheduleOrigin.RUNTIME, T0, code=False))
    rec = store.get_schedule("a")
    assert (rec.workflow, rec.spec["cron"], rec.spec["input"], rec.revision, rec.next_window) == (
        "wf",
        "0 2 * * *",
        {"x": [1]},
        1,
        at(14 * 3600),  # 02:00 Lisbon (WET, UTC+0) on 2 January
    )
    assert [r.key for r in store.list_schedules()] == ["a", "b"]
    assert store.delete_schedule("a") and not store.delete_schedule("a")
    assert store.get_schedule("a") is None


def test_a_plan_on_a_stale_revision_writes_nothing(store):
    _row(store, "k")
    plan = SchedulePlan("k", 1, {"skipped": 5}, runs=(fields("k@1"),))
    assert store.apply_schedule(plan, T0).created == ("k@1",)
    stale = store.apply_schedule(SchedulePlan("k", 1, {"skipped": 9}, runs=(fields("k@2"),)), T0)
    assert not stale.applied
    rec = store.get_schedule("k")
    assert (rec.skipped, rec.revision) == (5, 2)
    assert store.get_run("k@2") is None


def test_a_plan_inserts_runs_idempotently_and_cancels_the_active_one(store):
    _row(store, "k")
    running(store, "k@old")
    first = store.apply_schedule(SchedulePlan("k", 1, {}, runs=(fields("k@1"),), cancel=("k@old",)), T0)
    assert first.applied and first.created == ("k@1",)
    assert store.get_run("k@old").status == RunStatus.CANCELLED
    again = store.apply_schedule(SchedulePlan("k", 2, {}, runs=(fields("k@1"),), cancel=("k@gone",)), T0)
    assert again.applied and again.created == ()


def test_fire_schedules_plans_only_due_unpaused_rows_oldest_first_within_the_limit(store):
    _row(store, "late", every="1m")  # due at T0
    _row(store, "later", every="1m", start_at=at(30))
    _row(store, "paused", every="1m", paused=True)
    _row(store, "future", every="1m", start_at=at(3600))
    running(store, "late@prev")
    store.apply_schedule(SchedulePlan("late", 1, {"last_run_id": "late@prev"}), T0)
    seen: list[tuple[str, str | None]] = []

    def decide(rec: Any, last_status: str | None) -> SchedulePlan | None:
        seen.append((rec.key, last_status))
        if rec.key == "later":
            return None
        return SchedulePlan(rec.key, rec.revision, {"due_at": at(7200)}, runs=(fields(f"{rec.key}@w"),))

    results = store.fire_schedules(at(60), 1, decide)
    assert seen == [("late", RunStatus.RUNNING)]
    assert [(r.key, r.created) for r in results] == [("late", ("late@w",))]
    seen.clear()
    assert store.fire_schedules(at(60), 10, decide) == []
    assert seen == [("later", None)]


def test_a_page_of_firings_writes_fresh_rows_only_and_inserts_each_run_once(store):
    from durable.schedules.plan import FIRE_COLUMNS

    for key in ("p1", "p2", "p3"):
        _row(store, key)
    assert store.create_run(fields("p3@w"))  # its window's run exists already (a backfill, say)

    def decide(rec: Any, last_status: str | None) -> SchedulePlan:
        values = (at(60), at(60), None, f"{rec.key}@w", T0, 1, at(1))
        revision = rec.revision - 1 if rec.key == "p2" else rec.revision  # p2: planned on a stale read
        return SchedulePlan(
            rec.key, revision, dict(zip(FIRE_COLUMNS, values, strict=True)), runs=(fields(f"{rec.key}@w"),)
        )

    results = {r.key: r for r in store.fire_schedules(at(1), 10, decide)}
    assert (results["p1"].applied, results["p1"].created) == (True, ("p1@w",))
    assert (results["p2"].applied, results["p2"].created) == (False, ())
    assert (results["p3"].applied, results["p3"].created) == (True, ())
    assert store.get_run("p2@w") is None
    p1 = store.get_schedule("p1")
    assert (p1.revision, p1.last_run_id, p1.skipped, p1.due_at) == (2, "p1@w", 1, at(60))
    assert store.get_schedule("p2").revision == 1
