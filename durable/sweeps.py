"""Sweeps: re-derive due work from the database.

Each sweep is a plain function, safe to run at the same time on any number of
machines (every state change it makes is compare-and-set), bounded by
``DURABLE["SWEEP_BATCH"]`` per call, and returns how much it did.

``execute=True`` runs the work in the calling thread (worker loop, test kit);
``execute=False`` only announces it through the transport (Celery beat), so a
worker with the right queue picks it up.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from durable.engine import clock, lifecycle
from durable.engine.core import Engine
from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.registry import registry
from durable.exceptions import StepNotFound, WorkflowNotFound

logger = logging.getLogger("durable.sweeps")

StopCheck = Callable[[], bool]
# Runs a page of jobs (each the turn of one claimed run) and returns their results in order.
Runner = Callable[[Sequence[Callable[[], Any]]], list[Any]]


def _never() -> bool:
    return False


def expire_timeouts(engine: Engine, *, should_stop: StopCheck = _never) -> int:
    """Stop runs past their execution timeout (``@workflow(timeout=...)``); they end ``failed``."""
    now = clock.now()
    done = 0
    for run_id in engine.store.overdue_runs(now, engine.settings.sweep_batch):
        if should_stop():
            break
        error = {
            "message": "the run exceeded its execution timeout",
            "code": "timeout",
            "retryable": False,
            "type": "Timeout",
            "traceback": None,
        }
        rec = engine.store.get_run(run_id)
        if rec is None:
            continue
        if rec.status != "blocked":
            # The run's next turn stops at its first new operation, undoes completed steps
            # that declared a compensation (a saga), and ends failed with this error.
            if engine.store.request_timeout(run_id, now, error):
                done += 1
                engine.transport.dispatch_turn(run_id)
            continue
        # A blocked run cannot execute its undo here: it fails at once.
        owed = lifecycle.owed_record(engine, rec.workflow, "failed")
        if engine.store.fail_overdue(run_id, now, error, owed):
            done += 1
            _notify(engine, run_id)
            if owed:
                lifecycle.publish(engine, run_id)
    return done


def _notify(engine: Engine, run_id: str) -> None:
    """A run settled outside a turn: wake (and dispatch) the runs waiting on it."""
    for woken in engine.store.notify_settled(run_id, clock.now()):
        engine.transport.dispatch_turn(woken)


def recover_orphans(engine: Engine, *, execute: bool = True, should_stop: StopCheck = _never) -> dict[str, int]:
    """Take over runs left ``running`` by a turn whose lease expired (its worker died).

    The decision is made on the run as re-read under the new lease; a run past
    ``MAX_RECOVERY_ATTEMPTS`` goes ``dead`` (only if still running: a
    concurrent cancel wins).
    """
    store = engine.store
    counts = {"recovered": 0, "dead": 0}
    now = clock.now()
    for run_id in store.orphans(now, engine.settings.sweep_batch):
        if should_stop():
            break
        now = clock.now()
        lease_until = now + timedelta(seconds=engine.settings.lease)
        result = store.recover_orphan(
            run_id,
            engine.owner,
            now,
            lease_until,
            engine.settings.max_recovery_attempts,
            lambda workflow: lifecycle.owed_record(engine, workflow, "dead"),
        )
        if result is None:
            continue
        if isinstance(result, str):
            counts["dead"] += 1
            logger.error("run %s dead-lettered after too many recoveries", run_id)
            _notify(engine, run_id)
            lifecycle.publish(engine, run_id)
            continue
        counts["recovered"] += 1
        if execute:
            engine.run_turn(run_id, acquired=result)
        elif store.release(run_id, engine.owner, now, now, False):
            engine.transport.dispatch_turn(run_id)
    return counts


def recheck_blocked(engine: Engine) -> int:
    """Return blocked runs to pending once what blocked them is resolved.

    A run blocked on an unregistered workflow version waits until this process
    has that version; one blocked on a step no live worker served waits until
    such a worker advertises itself.
    """
    ready = []
    for row in engine.store.blocked_runs(engine.settings.sweep_batch):
        reason = row["error"] or {}
        if reason.get("code") == "no_capable_worker":
            if not engine.fleet.can_serve(reason.get("step", ""), reason.get("queue")):
                continue
        else:
            try:
                registry.get_workflow(row["workflow"], row["version"])
            except WorkflowNotFound:
                continue
        ready.append(row["id"])
    if not ready:
        return 0
    count = int(engine.store.unblock(ready, clock.now()))
    for run_id in ready:
        engine.transport.dispatch_turn(run_id)
    return count


def recover_steps(engine: Engine, *, execute: bool = True, should_stop: StopCheck = _never) -> int:
    """Handle running steps whose worker vanished (lease lapsed) or whose timeout passed.

    A vanished worker's step goes back to pending under the same step id and
    runs again. A timed-out attempt counts as a failure: retried under the
    step's policy, else the step fails with code ``step_timeout``.
    """
    store = engine.store
    now = clock.now()
    done = 0
    for row in store.expired_steps(now, engine.settings.sweep_batch):
        if should_stop():
            break
        run_id, seq = row["run_id"], row["seq"]
        if row["timeout_at"] is not None and row["timeout_at"] < now:
            error = {
                "message": f"step {row['name']!r} timed out",
                "code": "step_timeout",
                "retryable": True,
                "type": "StepTimeout",
                "traceback": None,
            }
            try:
                sd = registry.get_step(row["name"])
                retry = row["attempts"] <= sd.retries
                delay = sd.backoff.delay(row["attempts"]) if retry else 0.0
            except StepNotFound:
                retry, delay = False, 0.0
            if retry:
                store.finish_step(run_id, seq, now, error=error, retry_at=now + timedelta(seconds=delay))
                engine.transport.dispatch_step(run_id, seq, row["queue"], delay=delay)
            elif store.finish_step(run_id, seq, now, error=error):
                _turn(engine, run_id, execute)
            done += 1
            continue
        if store.reset_step(run_id, seq, row["wake_at"], now + _redelivery(engine)):
            done += 1
            if execute:
                engine.execute_step(run_id, seq)
            else:
                engine.transport.dispatch_step(run_id, seq, row["queue"])
    return done


def _redelivery(engine: Engine) -> timedelta:
    return timedelta(seconds=engine.settings.step_lease or engine.settings.reconcile_after)


def redispatch_lost_steps(engine: Engine, *, should_stop: StopCheck = _never) -> dict[str, int]:
    """Re-dispatch pending steps no worker took in time (lost message, flushed broker).

    The same step id is dispatched again, so a worker that did get the first
    message and a worker that gets the second cannot both settle it. With
    ``STEP_LEASE`` set, a step re-dispatched ``STEP_REDISPATCH_MAX`` times
    without any worker taking it fails with code ``remote_step_lost``, into
    the workflow's own error handling. Due retries are dispatched here too.
    """
    store = engine.store
    settings = engine.settings
    counts = {"redispatched": 0, "lost": 0}
    now = clock.now()
    for row in store.lost_steps(now, settings.sweep_batch):
        if should_stop():
            break
        run_id, seq = row["run_id"], row["seq"]
        retry_due = row["retry_at"] is not None and row["dispatches"] == 0
        if settings.step_lease and not retry_due and row["dispatches"] >= settings.step_redispatch_max:
            error = {
                "message": (f"step {row['name']!r} was dispatched {row['dispatches'] + 1} times and no worker took it"),
                "code": "remote_step_lost",
                "retryable": False,
                "type": "RemoteStepLost",
                "traceback": None,
            }
            if store.finish_step(run_id, seq, now, error=error):
                engine.transport.dispatch_turn(run_id)
            counts["lost"] += 1
            continue
        if store.redispatch_step(run_id, seq, row["wake_at"], now + _redelivery(engine)):
            engine.transport.dispatch_step(run_id, seq, row["queue"])
            counts["redispatched"] += 1
    return counts


def run_due_steps(engine: Engine, *, should_stop: StopCheck = _never) -> int:
    """Execute pending dispatched steps here (polling deployments and the test kit)."""
    done = 0
    for run_id, seq, _queue in engine.store.due_steps(clock.now(), engine.settings.sweep_batch):
        if should_stop():
            break
        if engine.execute_step(run_id, seq) != "skipped":
            done += 1
    return done


def wake_due_runs(
    engine: Engine, *, execute: bool = True, should_stop: StopCheck = _never, runner: Runner | None = None
) -> int:
    """Run (or dispatch) pending runs and suspended runs whose wake time has come.

    Executing, the sweep claims a page of due runs at once (their leases taken
    in one statement, see ``claim_due_runs``), reads their histories in one
    query, and runs each claimed turn under that lease, the final commits of
    a slice of the page together (``Engine.run_turns``). With a ``runner``
    (the worker's threads) the page is split in one slice per thread when
    recent turns were slow enough for threads to help (``Engine.turn_seconds``
    at least the interpreter's switch interval: turns waiting on I/O in user
    code); quick turns run as one slice, in the calling thread. With a
    ``runner`` it goes on with the next page while pages come back full, for
    up to ``WORKER_INTERVAL``. A claimed run whose turn
    does not start because a stop was requested is handed back, still due.
    """
    if not execute:
        done = 0
        for run_id in engine.store.due_runs(clock.now(), engine.settings.sweep_batch):
            if should_stop():
                break
            engine.transport.dispatch_turn(run_id)
            done += 1
        return done
    claim = getattr(engine.store, "claim_due_runs", None)
    if claim is None:
        # A store without set-wise claims: take each lease in its own compare-and-set.
        done = 0
        for run_id in engine.store.due_runs(clock.now(), engine.settings.sweep_batch):
            if should_stop():
                break
            if engine.run_turn(run_id) is not None:
                done += 1
        return done
    done = 0
    batch = engine.settings.sweep_batch
    started = time.monotonic()
    while not should_stop():
        now = clock.now()
        runs: list[RunRecord] = claim(engine.owner, now, now + timedelta(seconds=engine.settings.lease), batch)
        if runs:
            # The page's histories in one query (a run on its first turn has none to read).
            again = [run.id for run in runs if run.turns > 1]
            histories = engine.store.load_histories(again) if again else {}
            claimed = [(run, histories.get(run.id, {})) for run in runs]
            # One job per thread, each a slice of the page whose final commits go together.
            threads = engine.settings.worker_threads if runner else 1
            if engine.stats.turn_seconds < sys.getswitchinterval():
                # Turns quicker than the interpreter's switch interval gain nothing from threads:
                # they contend for the GIL, and every database wait then ends in a wait for it.
                threads = 1
            size = -(-len(claimed) // threads)
            slices = [claimed[i : i + size] for i in range(0, len(claimed), size)]
            done += sum((runner or _here)([partial(_claimed_turns, engine, part, should_stop) for part in slices]))
        # A full page means more runs may be due. The worker loop (``runner``) claims the next
        # page at once, for up to WORKER_INTERVAL; then the other sweeps get their turn.
        if runner is None or len(runs) < batch or time.monotonic() - started >= engine.settings.worker_interval:
            break
    return done


def _here(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    return [job() for job in jobs]


def _claimed_turns(
    engine: Engine, claimed: list[tuple[RunRecord, dict[int, CheckpointRecord]]], should_stop: StopCheck
) -> int:
    """Run the turns of runs this process claimed, their final commits together; how many ran."""
    try:
        return sum(status is not None for status in engine.run_turns(claimed, should_stop))
    except Exception:
        # The leases lapse and the orphan sweep takes these runs over.
        logger.exception("turns of %d claimed runs failed", len(claimed))
        return 0


def _turn(engine: Engine, run_id: str, execute: bool) -> None:
    if execute:
        engine.run_turn(run_id)
    else:
        engine.transport.dispatch_turn(run_id)


def publish_lifecycle(engine: Engine, *, should_stop: StopCheck = _never) -> dict[str, int]:
    """Deliver lifecycle events still owed, fire due debounce/batch accumulators, and heal.

    Owed runs are taken after a short grace (the live publish right after the
    terminal write usually got there first), one page at a time, each under
    its lifecycle lease. Healing looks at runs settled in the last few minutes
    for subscribers registered after they settled and marks those owed.
    """
    store = engine.store
    now = clock.now()
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
    now = now or clock.now()
    sources: dict[str, set[str]] = {}
    for wf in registry.workflows():
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


def tick(
    engine: Engine, *, execute: bool = True, should_stop: StopCheck = _never, runner: Runner | None = None
) -> dict[str, int]:
    """One pass of every sweep. Returns counts per sweep.

    ``runner`` runs the turns of the due runs the sweep claimed (the worker
    loop's threads); without it they run one after another in this thread.
    """
    counts = {"timeouts": expire_timeouts(engine, should_stop=should_stop)}
    counts.update(recover_orphans(engine, execute=execute, should_stop=should_stop))
    counts["unblocked"] = recheck_blocked(engine)
    counts["steps_recovered"] = recover_steps(engine, execute=execute, should_stop=should_stop)
    if execute:
        counts["steps"] = run_due_steps(engine, should_stop=should_stop)
    else:
        counts.update(redispatch_lost_steps(engine, should_stop=should_stop))
    counts["turns"] = wake_due_runs(engine, execute=execute, should_stop=should_stop, runner=runner)
    counts.update(publish_lifecycle(engine, should_stop=should_stop))
    return counts
