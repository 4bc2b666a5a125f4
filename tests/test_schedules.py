"""Schedules driven by the sweeps on the fake clock: windows, DST, overlap, catch-up, backfill, jitter, operators."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import durable
from durable.schedules.windows import jitter_delay, run_id
from durable.testing import drive, fake_clock
from tests import schedule_workflows as _registered  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def runs_of(key: str) -> list[durable.RunInfo]:
    page = durable.list_runs(attributes={"schedule_key": key}, limit=500)
    return sorted(page.items, key=lambda r: r.id)


def test_every_15_minutes_over_a_day_starts_96_runs_with_stable_ids():
    with fake_clock(T0) as clock:
        durable.create_schedule("quarter", "sched.window", every="15m", input={"n": 1})
        for _ in range(96):
            drive()
            drive()  # a second sweep in the same window starts nothing more
            clock.advance("15m")
    windows = [T0 + timedelta(minutes=15 * i) for i in range(96)]
    runs = runs_of("quarter")
    assert [r.id for r in runs] == sorted(run_id("quarter", w) for w in windows)
    assert all(r.status == "completed" for r in runs)
    first = durable.get_run(run_id("quarter", windows[0]))
    assert first.output == {"key": "quarter", "window": windows[0].isoformat(), "input": {"n": 1}}


@pytest.mark.parametrize(
    ("zone", "cron", "start", "expected"),
    [
        (
            "Europe/Lisbon",
            "30 1 * * *",
            datetime(2026, 3, 28, tzinfo=UTC),
            # 01:30 does not exist on 29 March: the gap's end, 02:00 WEST (01:00 UTC).
            ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"],
        ),
        (
            "Europe/Lisbon",
            "30 1 * * *",
            datetime(2026, 10, 24, tzinfo=UTC),
            # 01:30 happens twice on 25 October: once, the first (WEST, 00:30 UTC).
            ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"],
        ),
        (
            "America/New_York",
            "30 2 * * *",
            datetime(2026, 3, 7, tzinfo=UTC),
            ["2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30"],
        ),
        (
            "America/New_York",
            "30 1 * * *",
            datetime(2026, 10, 31, tzinfo=UTC),
            ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"],
        ),
    ],
)
def test_cron_across_dst_transitions_neither_loses_nor_doubles_a_window(zone, cron, start, expected):
    with fake_clock(start) as clock:
        durable.create_schedule("dst", "sched.window", cron=cron, timezone=zone)
        for _ in range(3 * 24 * 4):
            drive()
            clock.advance("15m")
    windows = [datetime.fromisoformat(w).replace(tzinfo=UTC) for w in expected]
    assert [r.id for r in runs_of("dst")] == [run_id("dst", w) for w in windows]


def test_catch_up_after_a_three_day_outage_starts_only_the_last_windows():
    with fake_clock(T0) as clock:
        durable.create_schedule("hourly", "sched.window", every="1h")
        durable.create_schedule("hourly3", "sched.window", every="1h", catch_up=3)
        drive()
        clock.advance("3d")  # no sweep runs for three days
        drive()
    back = T0 + timedelta(days=3)
    assert [r.id for r in runs_of("hourly")] == [run_id("hourly", T0), run_id("hourly", back)]
    assert [r.id for r in runs_of("hourly3")] == [
        run_id("hourly3", w) for w in (T0, back - timedelta(hours=2), back - timedelta(hours=1), back)
    ]
    assert durable.get_schedule("hourly").next_window == back + timedelta(hours=1)


def test_backfill_starts_each_window_once_and_refuses_more_than_1000():
    with fake_clock(T0 + timedelta(hours=2)):
        durable.create_schedule("minutely", "sched.window", every="1m")
        drive()  # the current window starts by the sweep
        ids = durable.backfill_schedule("minutely", T0 + timedelta(hours=1), T0 + timedelta(hours=2))
        assert len(ids) == 61 and ids[-1] == run_id("minutely", T0 + timedelta(hours=2))
        again = durable.backfill_schedule("minutely", T0 + timedelta(hours=1), T0 + timedelta(hours=2))
        assert again == ids
        drive()
        assert len(runs_of("minutely")) == 61
        with pytest.raises(durable.InvalidInput, match="more than 1000 windows"):
            durable.backfill_schedule("minutely", T0, T0 + timedelta(minutes=1000))
        with pytest.raises(durable.InvalidInput, match="start not after end"):
            durable.backfill_schedule("minutely", T0 + timedelta(hours=1), T0)


def test_jitter_delays_a_window_by_its_stable_amount_without_changing_its_id():
    with fake_clock(T0 - timedelta(minutes=1)) as clock:
        durable.create_schedule("spread", "sched.window", every="1h", jitter="30m")
        delay = jitter_delay("spread", T0, 1800)
        assert timedelta(0) < delay < timedelta(minutes=30)
        clock.set(T0 + delay - timedelta(seconds=1))
        drive()
        assert runs_of("spread") == []
        clock.set(T0 + delay)
        drive()
        assert [r.id for r in runs_of("spread")] == [run_id("spread", T0)]
        assert durable.get_run(run_id("spread", T0)).output["window"] == T0.isoformat()


def _windows(clock, count: int, step: str = "1m") -> None:
    for _ in range(count):
        drive()
        clock.advance(step)


def test_overlap_allow_starts_every_window():
    with fake_clock(T0) as clock:
        durable.create_schedule("allow", "sched.held", every="1m")
        _windows(clock, 3)
    assert [r.status for r in runs_of("allow")] == ["suspended"] * 3


def test_overlap_skip_records_skipped_windows_while_the_previous_run_is_active():
    with fake_clock(T0) as clock:
        durable.create_schedule("skip", "sched.held", every="1m", overlap="skip")
        _windows(clock, 3)
        assert [r.id for r in runs_of("skip")] == [run_id("skip", T0)]
        assert durable.get_schedule("skip").skipped == 2
        durable.signal(run_id("skip", T0), "go")
        # The sweep evaluates schedules before it runs turns: window 3 still sees the run active.
        _windows(clock, 2)
        assert durable.get_run(run_id("skip", T0)).status == "completed"
        assert [r.id for r in runs_of("skip")] == [run_id("skip", T0), run_id("skip", T0 + timedelta(minutes=4))]
        assert durable.get_schedule("skip").skipped == 3


def test_overlap_buffer_one_keeps_one_window_until_the_previous_run_ends():
    with fake_clock(T0) as clock:
        durable.create_schedule("buffer", "sched.held", every="1m", overlap="buffer_one")
        _windows(clock, 3)  # windows 0 (starts), 1 (buffered), 2 (dropped)
        info = durable.get_schedule("buffer")
        assert info.buffered == T0 + timedelta(minutes=1) and info.skipped == 1
        assert [r.id for r in runs_of("buffer")] == [run_id("buffer", T0)]
        durable.signal(run_id("buffer", T0), "go")
        drive()
        drive()
        assert [r.id for r in runs_of("buffer")] == [run_id("buffer", T0), run_id("buffer", T0 + timedelta(minutes=1))]
        assert durable.get_schedule("buffer").buffered is None


def test_overlap_cancel_other_cancels_the_active_run_then_starts():
    with fake_clock(T0) as clock:
        durable.create_schedule("cancel", "sched.held", every="1m", overlap="cancel_other")
        _windows(clock, 2)
    first, second = runs_of("cancel")
    assert (first.id, first.status) == (run_id("cancel", T0), "cancelled")
    assert (second.id, second.status) == (run_id("cancel", T0 + timedelta(minutes=1)), "suspended")


def test_pause_resume_and_trigger():
    with fake_clock(T0) as clock:
        durable.create_schedule("ops", "sched.window", every="1h")
        drive()
        assert durable.pause_schedule("ops").paused
        _windows(clock, 3, "1h")
        assert len(runs_of("ops")) == 1, "a paused schedule starts no window"
        triggered = durable.trigger_schedule("ops")
        drive()
        assert triggered.startswith("ops@trigger-")
        assert durable.get_run(triggered).output["window"] == clock.now().isoformat()
        clock.advance("30m")
        info = durable.resume_schedule("ops")
        assert not info.paused and info.next_window == T0 + timedelta(hours=4)
        assert info.last_run_id == triggered
        clock.advance("30m")
        drive()
    assert [r.id for r in runs_of("ops")] == sorted(
        [run_id("ops", T0), triggered, run_id("ops", T0 + timedelta(hours=4))]
    )


def test_runtime_api_refuses_bad_input_clearly():
    with fake_clock(T0):
        durable.create_schedule("once", "sched.window", every="1h")
        with pytest.raises(durable.ScheduleExists):
            durable.create_schedule("once", "sched.window", every="1h")
        with pytest.raises(durable.ScheduleNotFound):
            durable.pause_schedule("nope")
        with pytest.raises(durable.WorkflowNotFound):
            durable.create_schedule("x", "no.such.workflow", every="1h")
        with pytest.raises(durable.InvalidInput, match="invalid cron"):
            durable.create_schedule("x", "sched.window", cron="* * * * 9")
        with pytest.raises(durable.InvalidInput, match="unknown timezone"):
            durable.update_schedule("once", timezone="Nowhere/City")
        with pytest.raises(durable.InvalidInput, match="'@'"):
            durable.create_schedule("a@b", "sched.window", every="1h")
        info = durable.update_schedule("once", cron="0 3 * * *", timezone="Europe/Lisbon")
        assert info.schedule.every is None and info.description == "every day at 03:00 (Europe/Lisbon)"
        assert [s.key for s in durable.list_schedules()] == ["once"]
        durable.delete_schedule("once")
        with pytest.raises(durable.ScheduleNotFound):
            durable.delete_schedule("once")


def _declare(**schedule: object) -> None:
    """Deploy a version of the code whose workflow ``sched.code`` declares ``schedule``."""

    def nightly(ctx: durable.WorkflowContext, value: object = None) -> object:
        return value

    durable.workflow(name="sched.code", schedule=durable.Schedule(**schedule))(nightly)


@pytest.fixture
def code_schedule():
    from durable import runtime

    yield
    runtime.registry.remove("sched.code")


def test_a_code_schedule_changed_between_deploys_keeps_the_operators_changes(code_schedule):
    with fake_clock(T0) as clock:
        _declare(every="1h", input={"v": 1})
        drive()  # the first sweep syncs the code's schedules
        info = durable.get_schedule("sched.code")
        assert (info.origin, info.schedule.every, info.schedule.input) == ("code", 3600, {"v": 1})
        assert [r.id for r in runs_of("sched.code")] == [run_id("sched.code", T0)]
        durable.pause_schedule("sched.code")
        durable.update_schedule("sched.code", input={"v": "operator"})
        # Deploy: the code changes every= only.
        _declare(every="30m", input={"v": 1})
        clock.advance("10m")
        drive()
        info = durable.get_schedule("sched.code")
        assert info.paused, "a deploy never resumes a paused schedule"
        assert info.schedule.every == 1800, "the field the code changed follows the code"
        assert info.schedule.input == {"v": "operator"}, "the operator's change survives"
        # Deploy again with nothing changed: still the operator's values.
        _declare(every="30m", input={"v": 1})
        drive()
        assert durable.get_schedule("sched.code").schedule.input == {"v": "operator"}
        # The code now changes input too: the code wins that field.
        _declare(every="30m", input={"v": 2})
        drive()
        assert durable.get_schedule("sched.code").schedule.input == {"v": 2}


def test_a_code_schedule_the_code_drops_is_deleted_and_several_are_keyed_by_index(code_schedule):
    from durable import runtime

    with fake_clock(T0):

        def multi(ctx: durable.WorkflowContext) -> None:
            return None

        durable.workflow(
            name="sched.code", schedules=[durable.Schedule(every="1h"), durable.Schedule(cron="0 2 * * *")]
        )(multi)
        drive()
        assert [s.key for s in durable.list_schedules()] == ["sched.code:0", "sched.code:1"]
        runtime.registry.set_schedules("sched.code", [("sched.code:0", durable.Schedule(every="1h"))])
        drive()
        assert [s.key for s in durable.list_schedules()] == ["sched.code:0"]
