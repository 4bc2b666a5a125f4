"""The schedule sweep: start the runs of due windows, exactly once each, from any number of sweepers.

Run by every tick (:func:`durable.worker.tick.tick`). The store selects a
page of due rows (``SWEEP_BATCH``), each is planned by
:func:`durable.schedules.plan.plan_fire` and applied in the same
transaction; the runs it inserted are dispatched once it commits. A window's
run id is derived from its instant, and a run is inserted only if its id is
new, so racing sweepers start each window once.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

from durable.engine.core import Engine
from durable.engine.new_runs import clean_input, run_fields
from durable.engine.vocab import RunStatus
from durable.exceptions import DurableError
from durable.schedules.plan import ScheduleRecord, plan_fire
from durable.schedules.sync import ensure_synced

logger = logging.getLogger("durable.schedules")

# Search attributes every scheduled run carries (filterable; ``ctx.schedule_window`` reads the window).
KEY_ATTRIBUTE = "schedule_key"
WINDOW_ATTRIBUTE = "schedule_window"


def make_run(
    engine: Engine, rec: ScheduleRecord, now: datetime, run_id: str, window: datetime | None
) -> dict[str, Any] | None:
    """The fields of the run that starts ``window`` of ``rec`` (None: this process cannot start it)."""
    try:
        wf = engine.registry.get_workflow(rec.workflow)
        value = clean_input(wf, rec.spec.get("input"), engine.settings.max_payload_bytes)
    except DurableError as exc:
        logger.warning("schedule %r cannot start a run here: %s", rec.key, exc)
        return None
    attributes = {KEY_ATTRIBUTE: rec.key}
    if window is not None:
        attributes[WINDOW_ATTRIBUTE] = window.astimezone(UTC).isoformat()
    return run_fields(
        wf, run_id, value, now=now, namespace=engine.settings.default_namespace, search_attributes=attributes
    )


def _decide(engine: Engine, now: datetime, rec: ScheduleRecord, last_status: str | None) -> Any:
    try:
        return plan_fire(rec, last_status, now, partial(make_run, engine, rec, now))
    except DurableError as exc:
        # A row whose stored spec no longer validates: leave it to an operator, keep the others going.
        logger.error("schedule %r cannot be evaluated: %s", rec.key, exc)
        return None


def fire_due_schedules(engine: Engine) -> int:
    """Start the runs of due windows; how many runs it started.

    Page after page (``SWEEP_BATCH`` rows each) while pages come back full, for
    up to ``WORKER_INTERVAL`` seconds: many schedules sharing a window (every
    night at 02:00) start together instead of one page per tick.
    """
    ensure_synced(engine)
    batch = engine.settings.sweep_batch
    started = 0
    began = time.monotonic()
    while True:
        now = engine.clock.now()
        results = engine.store.fire_schedules(now, batch, partial(_decide, engine, now))
        for result in results:
            # The page committed: announce the runs cancel_other cancelled, then dispatch.
            engine.emit_settled(RunStatus.CANCELLED, result.cancelled)
            for run_id in (*result.woken, *result.created):
                engine.transport.dispatch_turn(run_id)
            started += len(result.created)
        if len(results) < batch or time.monotonic() - began >= engine.settings.worker_interval:
            return started
