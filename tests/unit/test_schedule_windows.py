"""Where schedule windows fall: pure functions, no database, no clock but the test's instants."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from durable.exceptions import InvalidInput
from durable.schedules.info import describe
from durable.schedules.spec import Overlap, Schedule
from durable.schedules.windows import between, jitter_delay, last_windows, next_window, run_id, to_instant, upcoming


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_every_15_minutes_over_a_day_is_96_windows_aligned_on_the_quarter_hours():
    spec = Schedule(every="15m")
    day = between(spec, utc(2026, 3, 1), utc(2026, 3, 1, 23, 59, 59), 1000)
    assert len(day) == 96
    assert day[0] == utc(2026, 3, 1) and day[-1] == utc(2026, 3, 1, 23, 45)
    assert all(b - a == timedelta(minutes=15) for a, b in itertools.pairwise(day))
    assert run_id("report", day[1]) == "report@20260301T001500Z"


def test_between_reports_one_window_past_its_limit_so_callers_can_refuse_an_overflow():
    spec = Schedule(every="1m")
    assert len(between(spec, utc(2026, 1, 1), utc(2026, 1, 1) + timedelta(minutes=999), 1000)) == 1000
    assert len(between(spec, utc(2026, 1, 1), utc(2026, 1, 1) + timedelta(minutes=1000), 1000)) == 1001


def test_every_counts_from_start_at_and_stops_at_end_at():
    spec = Schedule(every="1h", start_at=utc(2026, 1, 1, 0, 20), end_at=utc(2026, 1, 1, 2, 20))
    assert upcoming(spec, utc(2025, 12, 1), 10) == [
        utc(2026, 1, 1, 0, 20),
        utc(2026, 1, 1, 1, 20),
        utc(2026, 1, 1, 2, 20),
    ]
    assert next_window(spec, utc(2026, 1, 1, 2, 20)) is None


# Europe/Lisbon 2026: clocks go forward at 01:00 UTC on 29 March (00:59:59 WET -> 02:00 WEST)
# and back at 01:00 UTC on 25 October (01:59:59 WEST -> 01:00 WET).
# America/New_York 2026: forward at 07:00 UTC on 8 March (02:00 EST -> 03:00 EDT),
# back at 06:00 UTC on 1 November (02:00 EDT -> 01:00 EST).
DST_CASES = [
    # zone, daily cron at a wall-clock time the transition skips or repeats, the day before, the
    # transition's window (skipped: the gap's end; repeated: the first occurrence), the day after.
    ("Europe/Lisbon", "30 1 * * *", utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)),
    ("Europe/Lisbon", "30 1 * * *", utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)),
    ("America/New_York", "30 2 * * *", utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)),
    ("America/New_York", "30 1 * * *", utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
]


@pytest.mark.parametrize(("zone", "cron", "before", "transition", "after"), DST_CASES)
def test_daily_cron_across_dst_fires_once_a_day(zone, cron, before, transition, after):
    spec = Schedule(cron=cron, timezone=zone)
    assert upcoming(spec, before - timedelta(seconds=1), 3) == [before, transition, after]
    # Backwards finds the same windows (catch-up uses it).
    assert last_windows(spec, after, 3, not_before=before - timedelta(days=1)) == [before, transition, after]


@pytest.mark.parametrize(
    ("zone", "start", "end", "count"),
    [
        # 24 real hours, both ends included: 97 quarter hours.
        ("Europe/Lisbon", utc(2026, 3, 28, 12), utc(2026, 3, 29, 12), 97),
        ("Europe/Lisbon", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12), 93),
        ("America/New_York", utc(2026, 3, 7, 18), utc(2026, 3, 8, 18), 97),
        ("America/New_York", utc(2026, 10, 31, 18), utc(2026, 11, 1, 18), 93),
    ],
)
def test_quarter_hour_cron_across_dst_keeps_each_wall_clock_time_once(zone, start, end, count):
    spec = Schedule(cron="*/15 * * * *", timezone=zone)
    windows = between(spec, start, end, 1000)
    assert windows == sorted(set(windows)), "no window doubled, none out of order"
    local = [w.astimezone(spec.zone).replace(tzinfo=None) for w in windows]
    assert len(local) == len(set(local)), "a repeated wall-clock time fires once"
    # Forward: the skipped hour's four times collapse into the gap's end, itself the next quarter
    # hour in real time, so none is lost. Back: the repeated hour's second occurrence has no windows.
    assert len(windows) == count
    gaps = {b - a for a, b in itertools.pairwise(windows)}
    assert gaps == ({timedelta(minutes=15)} if count == 97 else {timedelta(minutes=15), timedelta(minutes=75)})


def test_a_time_in_the_gap_maps_to_the_gap_end_and_a_repeated_time_to_its_first_occurrence():
    lisbon = Schedule(cron="0 0 * * *", timezone="Europe/Lisbon").zone
    assert to_instant(datetime(2026, 3, 29, 1, 30), lisbon) == utc(2026, 3, 29, 1, 0)
    assert to_instant(datetime(2026, 10, 25, 1, 30), lisbon) == utc(2026, 10, 25, 0, 30)


def test_six_fields_put_the_seconds_first():
    spec = Schedule(cron="30 0 2 * * *")
    assert upcoming(spec, utc(2026, 1, 1), 1) == [utc(2026, 1, 1, 2, 0, 30)]


def test_jitter_is_stable_per_window_within_bounds_and_differs_between_windows():
    delays = [jitter_delay("nightly", utc(2026, 1, d), 600) for d in range(1, 29)]
    assert delays == [jitter_delay("nightly", utc(2026, 1, d), 600) for d in range(1, 29)]
    assert all(timedelta(0) <= d < timedelta(seconds=600) for d in delays)
    assert len(set(delays)) > 20
    assert jitter_delay("other", utc(2026, 1, 1), 600) != delays[0]
    assert jitter_delay("nightly", utc(2026, 1, 1), None) == timedelta(0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of"),
        ({"every": "15m", "cron": "* * * * *"}, "exactly one of"),
        ({"cron": "61 * * * *"}, "invalid cron"),
        ({"cron": "* * * *"}, "5 fields"),
        ({"cron": "0 0 30 2 *"}, "invalid cron"),
        ({"every": "soon"}, "invalid duration"),
        ({"every": 0}, "positive"),
        ({"every": "1m", "timezone": "Mars/Olympus"}, "unknown timezone"),
        ({"every": "1m", "overlap": "queue"}, "overlap must be one of"),
        ({"every": "1m", "catch_up": 0}, "catch_up"),
        ({"every": "1m", "start_at": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"every": "1m", "start_at": utc(2026, 2, 1), "end_at": utc(2026, 1, 1)}, "end_at"),
        ({"every": "1m", "input": {1, 2}}, "JSON"),
    ],
)
def test_a_bad_spec_is_refused_with_a_clear_message(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        Schedule(**kwargs)


def test_spec_round_trips_through_json_and_reads_in_words():
    spec = Schedule(cron="0 2 * * *", timezone="Europe/Lisbon", overlap="skip", jitter="5m", input={"a": 1})
    assert spec.overlap is Overlap.SKIP and spec.jitter == 300
    assert Schedule.from_json(spec.to_json()) == spec
    assert describe(spec) == "every day at 02:00 (Europe/Lisbon)"
    assert describe(Schedule(every="15m")) == "every 15 minutes"
    assert describe(Schedule(cron="*/5 * * * *")) == "every 5 minutes (UTC)"
    assert describe(Schedule(cron="0 9 * * 1")) == "every Monday at 09:00 (UTC)"
    assert describe(Schedule(cron="0 9 1-5 * *")) == 'cron "0 9 1-5 * *" (UTC)'
