"""Retention end to end on the fake clock: ages and overrides, every protected relationship, the archive hook,
bounded batches, racing sweepers, and every row keyed to a run gone with it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.test import override_settings

import durable
from durable import conf, runtime
from durable.checks import check_retention, check_retention_archive
from durable.engine.core import Engine
from durable.models import Run
from durable.signals import runs_evicted
from durable.testing import drive, fake_clock, run_until_settled
from durable.worker.retention import prune, sweep_retention

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
archived: list[list[str]] = []
knobs: dict[str, Any] = {}


def archive_runs(runs: list[dict[str, Any]]) -> None:
    """The RETENTION_ARCHIVE of these tests: records each batch, or fails while knobs["archive_fails"]."""
    if knobs.get("archive_fails"):
        raise OSError("object storage is down")
    archived.append([entry["run"]["id"] for entry in runs])


ARCHIVE = {"TRANSPORT": "manual", "LEASE": 30, "RETENTION_ARCHIVE": f"{__name__}.archive_runs"}


@pytest.fixture(autouse=True)
def _reset():
    archived.clear()
    knobs.clear()


# -- workflows -------------------------------------------------------------------


@durable.workflow(name="r_quick")
def r_quick(ctx, x):
    return ctx.local_step("double", lambda: 2 * x)


@durable.workflow(name="r_fails")
def r_fails(ctx, what="fail"):
    if what == "fail":
        raise durable.FatalError("no")
    return ctx.wait_signal(what)


@durable.workflow(name="r_waits")
def r_waits(ctx, name):
    return ctx.wait_signal(name)


@durable.workflow(name="r_parent")
def r_parent(ctx):
    return ctx.gather(durable.child_call(r_quick, 1), durable.child_call(r_waits, "go"))


@durable.workflow(name="r_watcher")
def r_watcher(ctx, run_id):
    return ctx.wait_for_run(run_id)


@durable.workflow(name="r_loop")
def r_loop(ctx, n):
    if ctx.wait_signal("next") == "stop":
        return n
    ctx.continue_as_new(n + 1)


@durable.workflow(name="r_short", retention={"completed": "1d"})
def r_short(ctx):
    return "short"


@durable.workflow(name="r_forever", retention={"completed": None})
def r_forever(ctx):
    return "kept"


def exists(run_id: str) -> bool:
    return Run.objects.filter(id=run_id).exists()


def settle(run_id: str) -> str:
    return run_until_settled(run_id).status


# -- ages and overrides ------------------------------------------------------------


def test_default_ages_delete_completed_after_30_days_failed_after_90_and_never_dead():
    with fake_clock(T0) as clock:
        done = durable.start(r_quick, 1, run_id="done")
        failed = durable.start(r_fails, run_id="failed")
        assert (settle(done), settle(failed)) == ("completed", "failed")
        Run.objects.create(id="dead", workflow="r_quick", status="dead", finished_at=T0)
        clock.advance("29d")
        drive()
        assert exists("done")
        clock.advance("2d")
        drive()
        assert not exists("done") and exists("failed")
        clock.advance("60d")
        drive()
        assert not exists("failed") and exists("dead")
        clock.advance("3650d")
        drive()
        assert exists("dead")


def test_a_workflow_s_retention_overrides_the_setting_for_its_runs():
    with fake_clock(T0) as clock:
        for wf, rid in ((r_short, "short"), (r_forever, "forever"), (r_quick, "plain")):
            assert settle(durable.start(wf, *([1] if wf is r_quick else []), run_id=rid)) == "completed"
        clock.advance("2d")
        drive()
        assert not exists("short") and exists("forever") and exists("plain")
        clock.advance("400d")
        drive()
        assert exists("forever") and not exists("plain")


def test_retention_none_keeps_everything_and_bad_values_are_refused():
    with override_settings(DURABLE={"TRANSPORT": "manual", "RETENTION": None}), fake_clock(T0) as clock:
        settle(durable.start(r_quick, 1, run_id="kept"))
        clock.advance("1000d")
        drive()
        assert exists("kept")
    for bad, message in (
        ({"running": "1d"}, "unknown status 'running'"),
        ({"completed": "soon"}, "invalid duration 'soon'"),
        ({"completed": 0}, "must be a positive age or None"),
        ("30d", "must be a dict of status to age"),
    ):
        with pytest.raises(ImproperlyConfigured, match=message):
            conf.parse({"RETENTION": bad})
    with pytest.raises(ImproperlyConfigured, match="RETENTION_ARCHIVE"):
        conf.parse({"RETENTION_ARCHIVE": 42})
    with override_settings(DURABLE={"RETENTION": None}):
        assert [m.id for m in check_retention()] == ["durable.W030"]
    with override_settings(DURABLE={"RETENTION": {"completed": None, "cancelled": None, "failed": None}}):
        assert [m.id for m in check_retention()] == ["durable.W030"]
    with override_settings(DURABLE={"RETENTION": {"completed": None}}):
        assert check_retention() == []
    with override_settings(DURABLE={"RETENTION_ARCHIVE": "tests.test_retention.nowhere"}):
        assert [m.id for m in check_retention_archive()] == ["durable.E030"]
    with override_settings(DURABLE={"RETENTION_ARCHIVE": f"{__name__}.archive_runs"}):
        assert check_retention_archive() == []
    with pytest.raises(durable.ConfigurationError, match="workflow 'r_bad' retention has unknown status 'done'"):
        durable.workflow(name="r_bad", retention={"done": "1d"})(lambda ctx: None)


# -- what an active run still needs ------------------------------------------------


def test_a_completed_child_is_kept_while_its_parent_waits():
    with fake_clock(T0) as clock:
        durable.start(r_parent, run_id="parent")
        assert settle("parent") == "suspended"
        assert durable.get_run("parent.child.1").status == "completed"
        clock.advance("40d")
        drive()
        assert exists("parent.child.1")
        durable.signal("parent.child.2", "go", "now")
        assert settle("parent") == "completed"
        clock.advance("31d")
        drive()
        assert not exists("parent.child.1") and not exists("parent")


def test_a_run_another_run_waits_for_is_kept_until_that_run_read_it():
    with fake_clock(T0) as clock:
        durable.start(r_waits, "go", run_id="target")
        durable.start(r_watcher, "target", run_id="watcher")
        assert settle("target") == "suspended" and settle("watcher") == "suspended"
        durable.signal("target", "go", {"v": 1})
        engine = runtime.get_engine()
        engine.run_turn("target")  # the target completes and wakes the watcher, which has not run yet
        assert durable.get_run("target").status == "completed"
        clock.advance("31d")
        assert prune(engine).runs == {}
        assert exists("target")
        assert settle("watcher") == "completed"
        assert durable.get_run("watcher").output == {"v": 1}
        prune(engine)  # (the sweep of the ticks that ran the watcher may have been first)
        assert not exists("target")


def test_a_continue_as_new_chain_is_kept_while_its_latest_run_is_active():
    with fake_clock(T0) as clock:
        durable.start(r_loop, 0, run_id="loop")
        settle("loop")
        for _ in range(2):
            durable.signal(durable.get_run("loop", follow=True).id, "next", "again")
            settle("loop")
            clock.advance("20d")
        chain = [r.id for r in Run.objects.filter(workflow="r_loop").order_by("created_at")]
        assert len(chain) == 3
        clock.advance("40d")
        drive()
        assert all(exists(rid) for rid in chain)
        durable.signal(chain[-1], "next", "stop")
        assert settle("loop") == "completed"
        assert durable.get_run("loop", follow=True).output == 2
        clock.advance("31d")
        drive()
        assert not any(exists(rid) for rid in chain)


def test_the_origin_of_an_active_retry_is_kept():
    with fake_clock(T0) as clock:
        assert settle(durable.start(r_fails, run_id="origin")) == "failed"
        retry = durable.retry_with_input("origin", "go")
        assert settle(retry) == "suspended"
        clock.advance("100d")
        drive()
        assert exists("origin")
        durable.signal(retry, "go", "done")
        assert settle(retry) == "completed"
        clock.advance("10m")
        drive()
        assert not exists("origin") and exists(retry)


# -- the archive hook --------------------------------------------------------------


def test_the_archive_gets_each_batch_as_json_before_it_is_deleted():
    seen: list[dict[str, Any]] = []

    def receiver(sender: Any, runs: list[dict[str, Any]], **kwargs: Any) -> None:
        assert all(exists(entry["run"]["id"]) for entry in runs)  # before the delete
        seen.extend(runs)

    runs_evicted.connect(receiver)
    try:
        with override_settings(DURABLE=ARCHIVE), fake_clock(T0) as clock:
            settle(durable.start(r_quick, 3, run_id="a"))
            clock.advance("31d")
            drive()
    finally:
        runs_evicted.disconnect(receiver)
    assert archived == [["a"]] and not exists("a")
    [entry] = seen
    assert entry["run"]["output"] == 6 and entry["run"]["workflow"] == "r_quick"
    assert [cp["name"] for cp in entry["checkpoints"]] == ["double"]


def test_a_failing_archive_deletes_nothing_and_is_retried_at_the_next_pass(caplog):
    with override_settings(DURABLE=ARCHIVE), fake_clock(T0) as clock:
        for rid in ("a", "b"):
            settle(durable.start(r_quick, 1, run_id=rid))
        clock.advance("31d")
        knobs["archive_fails"] = True
        drive()
        assert exists("a") and exists("b") and archived == []
        assert "the archive hook failed; 2 run(s) kept" in caplog.text
        drive()  # not due again before RETENTION_INTERVAL
        knobs.clear()
        clock.advance("10m")
        drive()
        assert not exists("a") and not exists("b") and archived == [["a", "b"]]


def test_a_failing_signal_receiver_also_keeps_the_batch():
    def refuse(sender: Any, runs: Any, **kwargs: Any) -> None:
        raise RuntimeError("archive refused")

    runs_evicted.connect(refuse)
    try:
        with fake_clock(T0) as clock:
            settle(durable.start(r_quick, 1, run_id="a"))
            clock.advance("31d")
            report = prune(runtime.get_engine())
    finally:
        runs_evicted.disconnect(refuse)
    assert report.archive_error == "RuntimeError: archive refused" and report.runs == {}
    assert exists("a") and Run.objects.get(id="a").locked_by is None


# -- bounded batches, racing sweepers ------------------------------------------------


def test_each_tick_deletes_one_bounded_batch_and_comes_back_while_there_is_more():
    with override_settings(DURABLE={**ARCHIVE, "RETENTION_BATCH": 3}), fake_clock(T0) as clock:
        for i in range(7):
            settle(durable.start(r_quick, i, run_id=f"run-{i}"))
            clock.advance("1s")
        clock.advance("31d")
        engine = runtime.get_engine()
        deleted = []
        for _ in range(4):
            deleted.append(sweep_retention(engine))
            # Not due again before it rested three times what its batch took (a real-time measure).
            rest = engine.stats.retention_due - clock.now()
            assert deleted[-1] == 0 or timedelta(0) < rest < timedelta(seconds=30)
            assert sweep_retention(engine) == 0
            clock.advance(rest)
        assert deleted == [3, 3, 1, 0]
    assert archived == [["run-0", "run-1", "run-2"], ["run-3", "run-4", "run-5"], ["run-6"]]


def test_the_sweep_goes_on_past_the_runs_it_keeps_instead_of_rereading_them():
    # 25 completed children of a suspended parent, older than the one run retention may delete:
    # more kept runs than one pass reads (10 pages of 2), so each pass must go on where the last stopped.
    Run.objects.create(id="parent", workflow="r_parent", status="suspended", wake_at=T0 + timedelta(days=400))
    for i in range(25):
        Run.objects.create(
            id=f"child-{i:02d}", workflow="r_quick", status="completed", parent_id="parent",
            finished_at=T0 + timedelta(seconds=i),
        )  # fmt: skip
    Run.objects.create(id="free", workflow="r_quick", status="completed", finished_at=T0 + timedelta(minutes=1))
    with override_settings(DURABLE={"TRANSPORT": "manual", "RETENTION_BATCH": 2}), fake_clock(T0) as clock:
        clock.advance("31d")
        engine = runtime.get_engine()
        passes = 0
        while exists("free") and passes < 5:
            sweep_retention(engine)
            passes += 1
            clock.advance(engine.stats.retention_due - clock.now())
    assert not exists("free") and passes == 2
    assert Run.objects.filter(parent_id="parent").count() == 25


def test_two_sweepers_racing_take_disjoint_batches_and_delete_each_run_once():
    with override_settings(DURABLE={**ARCHIVE, "RETENTION_BATCH": 5}), fake_clock(T0) as clock:
        for i in range(10):
            settle(durable.start(r_quick, i, run_id=f"run-{i}"))
        clock.advance("31d")
        first = runtime.get_engine()
        second = Engine(
            first.store, first.transport, first.settings, registry=first.registry, clock=first.clock, owner="b"
        )
        # Each sweeper's hook waits for the other's: both hold a claimed batch at the same time.
        both = threading.Barrier(2, timeout=30)
        reports = {}

        def sweep(engine: Engine, name: str) -> None:
            def hook(runs: list[dict[str, Any]]) -> None:
                if len(archived) < 2:
                    archived.append([entry["run"]["id"] for entry in runs])
                    both.wait()

            try:
                reports[name] = prune(engine, archive=hook)
            finally:
                from django.db import connection

                connection.close()

        threads = [threading.Thread(target=sweep, args=(e, n)) for e, n in ((first, "a"), (second, "b"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert sorted(rid for batch in archived for rid in batch) == sorted(f"run-{i}" for i in range(10))
    assert reports["a"].count + reports["b"].count == 10
    assert not Run.objects.filter(workflow="r_quick").exists()


# -- every row keyed to a run --------------------------------------------------------

# Tables of the durable app with no foreign key to a run, and why retention leaves them alone.
NOT_KEYED = {
    "BufferedEvent": "named events are keyed by event id, not by a run",
    "LifecycleBatch": "holds copies of the events it batches, for a subscriber",
    "WorkerDescriptor": "a worker process",
    "Schedule": "last_run_id is a pointer, read as missing once the run is gone",
    "Queue": "a step queue's limits and state, keyed by the queue's name (a finished run holds no slot)",
    "SingletonSlot": "one row per singleton key, holding no run id (the key's runs are counted)",
    "Entity": "an entity's state outlives the runs that changed it (its op log is bounded instead)",
    "EntityOp": "an entity's op log row, deleted by the entity's own bound (op ids name runs, not keys)",
}


def _keyed_models() -> list[tuple[type[models.Model], str]]:
    found = []
    for model in apps.get_app_config("durable").get_models():
        for f in model._meta.get_fields():
            if isinstance(f, models.ForeignKey) and f.related_model is Run:
                found.append((model, f.name))
    return found


def _rows_of(run_id: str) -> dict[str, int]:
    return {m.__name__: m._default_manager.filter(**{field: run_id}).count() for m, field in _keyed_models()}


def test_every_row_keyed_to_a_run_is_deleted_with_it():
    keyed = {model.__name__ for model, _ in _keyed_models()}
    others = {m.__name__ for m in apps.get_app_config("durable").get_models()} - keyed - {"Run"}
    assert others == set(NOT_KEYED), "a new table: key it to the run (deleted with it) or say why in NOT_KEYED"
    with fake_clock(T0) as clock:
        durable.start(r_waits, "go", run_id="full")
        settle("full")
        durable.signal("full", "extra", {"buffered": True})
        durable.signal("full", "go", "done")
        assert settle("full") == "completed"
        # Give every keyed table a row of this run (a waiter left behind, say), then prune.
        from durable.models import SignalWaiter

        SignalWaiter.objects.create(run_id="full", name="left", seq=99)
        counts = _rows_of("full")
        assert all(counts.values()), counts
        clock.advance("31d")
        drive()
        left = _rows_of("full")
    assert not exists("full")
    assert left == dict.fromkeys(keyed, 0)
