"""Three ``durable_worker`` processes evaluate one 5-second schedule for two minutes: every window starts once.

Real processes on PostgreSQL, real time (the point is the race between
sweepers): each worker's loop runs the schedule sweep every half second, so
all three evaluate every window. The run id of a window is unique, so a
doubled window cannot exist as a second row; what could break is a window
lost (a gap in the sequence), a window started by a revision race with a
different id, or a run not executed. The test asserts the exact, gap-free
sequence of windows and that more than one process started and ran them.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

import durable
from durable.schedules.windows import run_id
from tests import schedule_workflows as _registered  # noqa: F401
from tests.processes import logs as worker_logs
from tests.processes import spawn_worker, stop

INTERVAL = timedelta(seconds=5)
DURATION = 125.0

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(300)
def test_three_workers_start_every_window_of_a_5_second_schedule_exactly_once(tmp_path):
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=10)
    durable.create_schedule("fleet", "sched.where", every="5s", start_at=start)
    tags = [f"worker{i}" for i in range(3)]
    workers = [spawn_worker(tmp_path, tag, "tests.schedule_settings") for tag in tags]
    try:
        time.sleep((start - datetime.now(UTC)).total_seconds() + DURATION)
        for proc in workers:
            assert proc.poll() is None, "a worker died"
        end = datetime.now(UTC)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)  # all at once: they drain in parallel
        for proc in workers:
            stop(proc)
    logs = worker_logs(tmp_path, tags)
    runs = durable.list_runs(attributes={"schedule_key": "fleet"}, limit=500).items
    by_window = {datetime.fromisoformat(r.search_attributes["schedule_window"]): r for r in runs}
    started = sorted(by_window)
    # Every window from the first to the last one due before ``end``; one more may
    # have been started while the workers shut down, and the last may not be due yet.
    due = int((end - start) / INTERVAL) + 1
    expected = [start + i * INTERVAL for i in range(due + 1)]
    assert due >= 24, "at least two minutes of 5-second windows"
    assert started == expected[: len(started)], logs
    assert len(started) >= due - 1, logs
    assert sorted(r.id for r in runs) == sorted(run_id("fleet", w) for w in started)
    # A run started in the last windows may still be in flight at SIGTERM; every earlier one ran once.
    settled = [by_window[w] for w in started if w <= end - 2 * INTERVAL]
    assert len(settled) >= due - 3, logs
    assert all(r.status == "completed" for r in settled), logs
    assert all(datetime.fromisoformat(r.output["window"]) == w for w, r in by_window.items() if r.output), logs
    pids = {r.output["pid"] for r in settled}
    assert len(pids) >= 2, f"the windows were run by one process only: {pids}"
