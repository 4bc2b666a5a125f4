"""The benchmark's CPU accounting over a window (pure functions on injected snapshots)."""

from __future__ import annotations

import os

from bench.cpu import per_unit, window


def test_a_window_counts_the_processes_alive_at_both_ends_by_group() -> None:
    before = {"machine": 100.0, "processes": {1: ("postgres", 5.0), 2: ("workers", 7.0), 3: ("postgres", 1.0)}}
    after = {"machine": 103.5, "processes": {1: ("postgres", 6.25), 2: ("workers", 9.0), 4: ("workers", 0.5)}}
    # pid 3 ended and pid 4 began in the window: the machine's busy time holds them, the groups do not
    assert window(before, after) == {"machine": 3.5, "postgres": 1.25, "workers": 2.0}
    assert window({}, after) is None


def test_per_unit_gives_the_rate_the_cores_allow_at_that_cost() -> None:
    got = per_unit({"machine": 4.0, "postgres": 1.0, "workers": 2.5}, 10_000)
    assert got is not None
    assert got["cpu_ms_per_unit"] == {"machine": 0.4, "postgres": 0.1, "workers": 0.25}
    cores = os.cpu_count() or 1
    assert got["units_per_s_at_full_cores"] == round(cores * 1000 / 0.4, 1)
    assert per_unit({"machine": 0.0, "postgres": 0.0, "workers": 0.0}, 10) is None
    assert per_unit(None, 10) is None
