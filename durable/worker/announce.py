"""Lifecycle sweep: deliver lifecycle events still owed, fire due batches, heal missed subscriptions."""

from __future__ import annotations

from typing import Any

from durable.engine import lifecycle
from durable.engine.core import Engine
from durable.worker.due import StopCheck, never


def publish_lifecycle(engine: Engine, *, should_stop: StopCheck = never) -> dict[str, int]:
    """Deliver lifecycle events still owed, fire due debounce/batch accumulators, and heal.

    Owed runs are taken after a short grace (the live publish right after the
    terminal write usually got there first), one page at a time, each under
    its lifecycle lease. Healing looks at runs settled in the last few minutes
    for subscribers registered after they settled and marks those owed.
    """
    store = engine.store
    now = engine.clock.now()
    counts = {"published": 0, "batches": 0, "healed": 0}
    for run_id in store.owed_runs(now - lifecycle.SWEEP_GRACE, engine.settings.sweep_batch):
        if should_stop():
            break
        report = lifecycle.publish(engine, run_id)
        counts["published"] += sum(1 for outcome in report.values() if outcome in ("started", "coalesced"))
    for created in store.fire_due_batches(now, engine.settings.sweep_batch, lifecycle.batch_run_maker(engine)):
        counts["batches"] += 1
        engine.transport.dispatch_turn(created)
    counts["healed"] = heal_lifecycle(engine, now)
    return counts


def heal_lifecycle(engine: Engine, now: Any = None) -> int:
    """Mark recently settled runs owed to subscribers they never recorded, then publish them."""
    now = now or engine.clock.now()
    sources: dict[str, set[str]] = {}
    for wf in engine.registry.workflows():
        for event in wf.on_event:
            if event.startswith("run.") and ":" in event:
                sources.setdefault(event.split(":", 1)[1], set()).add(event)
    if not sources:
        return 0
    healed = 0
    for run in engine.store.settled_since(list(sources), now - lifecycle.HEAL_WINDOW, engine.settings.sweep_batch):
        ending = lifecycle.ending_of(run.status)
        if ending is None:
            continue
        known = run.lifecycle or {}
        recorded = (
            set(known.get("owed", []))
            | set(known.get("started", {}))
            | set(known.get("coalesced", {}))
            | set(known.get("failed", {}))
            | set(known.get("skipped", []))
        )
        missing = [s for s in lifecycle.subscribers_for(engine, run.workflow, ending) if s not in recorded]
        if missing and engine.store.mark_owed(run.id, missing):
            lifecycle.publish(engine, run.id)
            healed += 1
    return healed
