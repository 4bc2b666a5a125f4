"""Sweeps that repair what a crash, a lost message or a deadline left behind.

Orphaned runs (their turn's lease expired), running steps whose worker vanished
or whose attempt timed out, pending steps no worker took, runs past their
execution timeout, and blocked runs whose cause is gone. Each sweep is safe to
run at the same time on any number of machines (every state change it makes is
compare-and-set), bounded by ``DURABLE["SWEEP_BATCH"]`` per call, and returns
how much it did. ``execute=True`` runs the work in the calling thread (worker
loop, test kit); ``execute=False`` only announces it through the transport
(Celery beat).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from durable.engine import admission, lifecycle, logs
from durable.engine.core import Engine
from durable.engine.namespaces import scope, serves_namespace
from durable.engine.ports import ClaimCheck
from durable.engine.retry import retry_delay
from durable.engine.vocab import RunStatus
from durable.exceptions import StepNotFound, WorkflowNotFound
from durable.worker.due import StopCheck, never

logger = logging.getLogger("durable.sweeps")


def expire_timeouts(engine: Engine, *, should_stop: StopCheck = never) -> int:
    """Stop runs past their execution timeout (``@workflow(timeout=...)``); they end ``failed``."""
    now = engine.clock.now()
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
        if rec.status not in (RunStatus.BLOCKED, RunStatus.QUEUED):
            # The run's next turn stops at its first new operation, undoes completed steps
            # that declared a compensation (a saga), and ends failed with this error.
            if engine.store.request_timeout(run_id, now, error):
                done += 1
                engine.transport.dispatch_turn(run_id)
            continue
        # A blocked run cannot execute its undo here, a queued one never started: it fails at once.
        owed = lifecycle.owed_record(engine, rec.workflow, RunStatus.FAILED)
        if engine.store.fail_overdue(run_id, now, error, owed):
            done += 1
            engine.emit_settled(RunStatus.FAILED, [run_id])
            _notify(engine, run_id)
            if owed:
                lifecycle.publish(engine, run_id)
    return done


def _notify(engine: Engine, run_id: str) -> None:
    """A run settled outside a turn: wake (and dispatch) the runs waiting on it."""
    for woken in engine.store.notify_settled(run_id, engine.clock.now()):
        engine.transport.dispatch_turn(woken)


def recover_orphans(engine: Engine, *, execute: bool = True, should_stop: StopCheck = never) -> dict[str, int]:
    """Take over runs left ``running`` by a turn whose lease expired (its worker died).


    The decision is made on the run as re-read under the new lease; a run past
    ``MAX_RECOVERY_ATTEMPTS`` goes ``dead`` (only if still running: a
    concurrent cancel wins).
    """
    store = engine.store
    counts = {"recovered": 0, "dead": 0}
    now = engine.clock.now()
    for run_id in store.orphans(now, engine.settings.sweep_batch, **scope(engine.namespaces)):
        if should_stop():
            break
        now = engine.clock.now()
        lease_until = now + timedelta(seconds=engine.settings.lease)
        result = store.recover_orphan(
            run_id,
            engine.owner,
            now,
            lease_until,
            engine.settings.max_recovery_attempts,
            lambda workflow: lifecycle.owed_record(engine, workflow, RunStatus.DEAD),
        )
        if result is None:
            continue
        if isinstance(result, str):
            counts["dead"] += 1
            logger.error("run %s dead-lettered after too many recoveries", run_id, extra=logs.fields(run_id))
            engine.emit_settled(RunStatus.DEAD, [run_id])
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
                engine.registry.get_workflow(row["workflow"], row["version"])
            except WorkflowNotFound:
                continue
        ready.append(row["id"])
    if not ready:
        return 0
    count = int(engine.store.unblock(ready, engine.clock.now()))
    for run_id in ready:
        engine.transport.dispatch_turn(run_id)
    return count


def recover_steps(engine: Engine, *, execute: bool = True, should_stop: StopCheck = never) -> int:
    """End running steps whose attempt ran out: their worker vanished (lease lapsed) or their timeout passed.

    Either way the attempt counts as a failed one (code ``worker_lost`` or
    ``step_timeout``) under the step's retry policy: retried after its
    backoff under the same step id, else the step fails into the workflow's
    own error handling (``except StepFailed``). A step that takes its worker
    down with it every time is therefore attempted at most ``retries + 1``
    times. Each end is compare-and-set on the attempt's claim
    (``Store.lapse_step``): of sweepers racing on one attempt exactly one
    records it, and the late result of a worker that was not dead after all
    is refused. A sweeper without the step's definition cannot know its
    retries: it fails the step.
    """
    store = engine.store
    now = engine.clock.now()
    done = 0
    for row in store.expired_steps(now, engine.settings.sweep_batch):
        if should_stop():
            break
        run_id, seq = row["run_id"], row["seq"]
        error = _lapse_error(row, now)
        try:
            delay = retry_delay(engine.registry.get_step(row["name"]), error, row["attempts"])
        except StepNotFound:
            delay = None
        retry_at = now + timedelta(seconds=delay) if delay is not None else None
        if not store.lapse_step(run_id, seq, now, ClaimCheck(row["locked_by"], row["attempts"]), error, retry_at):
            continue  # another sweeper recorded it, or the attempt's result landed first
        done += 1
        if admission.limited(engine, row["queue"]):
            # Its slot is free (a retry waits for its admission again, once due).
            admission.admit_next(engine, [row["queue"]])
            if delay is None:
                _turn(engine, run_id, execute)
        elif delay is not None:
            engine.transport.dispatch_step(run_id, seq, row["queue"], delay=delay)
        else:
            _turn(engine, run_id, execute)
    return done


def admit_queues(engine: Engine) -> int:
    """Admit what each limited queue allows now: a rate's next starts, due retries, lapsed admissions,
    a resumed queue or a raised limit, any trigger that was lost (see :mod:`durable.engine.admission`)."""
    return admission.admit_due(engine)


def _lapse_error(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The error an attempt that ran out ends with: its timeout passed, or its worker was lost."""
    name, attempt = row["name"], row["attempts"]
    if row["timeout_at"] is not None and row["timeout_at"] < now:
        code, kind, message = "step_timeout", "StepTimeout", f"step {name!r} timed out"
    else:
        code, kind = "worker_lost", "WorkerLost"
        message = f"step {name!r} lost its worker during attempt {attempt} (its execution lease lapsed)"
    return {"message": message, "code": code, "retryable": True, "type": kind, "traceback": None}


def _redelivery(engine: Engine, sent: int = 0) -> timedelta:
    """When to send a pending step again after it has been sent ``sent`` more times unclaimed.

    ``STEP_LEASE`` doubled per unclaimed re-send, at most ``RECONCILE_AFTER``:
    a lost message is sent again soon, while a step only queued behind a long
    backlog piles up a few duplicate messages, not one per window.
    """
    settings = engine.settings
    first = settings.step_lease or settings.reconcile_after
    return timedelta(seconds=min(first * 2 ** min(sent, 32), max(first, settings.reconcile_after)))


def redispatch_lost_steps(engine: Engine, *, should_stop: StopCheck = never) -> dict[str, int]:
    """Re-dispatch pending steps no worker took in time (lost message, flushed broker).


    The same step id is dispatched again, so a worker that did get the first
    message and a worker that gets the second cannot both run it (the claim
    is compare-and-set on ``pending``) nor both settle it. A step still
    unclaimed is sent again after twice as long each time (``STEP_LEASE``,
    doubling, at most ``RECONCILE_AFTER``). With ``STEP_REDISPATCH_MAX`` set,
    a step re-dispatched that many times without any worker taking it fails
    with code ``remote_step_lost``, into the workflow's own error handling;
    by default it is sent again for as long as it waits. Due retries are
    dispatched here too.
    """
    store = engine.store
    settings = engine.settings
    counts = {"redispatched": 0, "lost": 0}
    now = engine.clock.now()
    for row in store.lost_steps(now, settings.sweep_batch):
        if should_stop():
            break
        run_id, seq = row["run_id"], row["seq"]
        retry_due = row["retry_at"] is not None and row["dispatches"] == 0
        give_up = settings.step_redispatch_max
        if give_up is not None and not retry_due and row["dispatches"] >= give_up:
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
        sent = row["dispatches"] + (0 if retry_due else 1)
        if store.redispatch_step(run_id, seq, row["wake_at"], now + _redelivery(engine, sent)):
            engine.transport.dispatch_step(run_id, seq, row["queue"])
            counts["redispatched"] += 1
    return counts


def _turn(engine: Engine, run_id: str, execute: bool) -> None:
    if execute and _served(engine, run_id):
        engine.run_turn(run_id)
    else:
        engine.transport.dispatch_turn(run_id)


def _served(engine: Engine, run_id: str) -> bool:
    """Whether this worker takes the run's turn (a scoped worker leaves other namespaces' runs, now due,
    to their own workers' due sweep)."""
    if engine.namespaces is None:
        return True
    run = engine.store.get_run(run_id)
    return run is not None and serves_namespace(engine.namespaces, run.namespace)
