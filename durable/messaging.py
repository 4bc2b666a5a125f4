"""Talking to runs from outside: named events, updates, queries, waiting for a result.

Service functions like those of :mod:`durable.api`: validated before anything
is written, dispatch after the caller's transaction commits.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from durable import conf, runtime
from durable.api import RunInfo, _check_id, _check_name, _create, _dispatch_after_commit
from durable.engine import lifecycle
from durable.engine.new_runs import clean_input, run_fields
from durable.engine.serialization import to_json
from durable.engine.vocab import UPDATE_TOKEN
from durable.exceptions import (
    EventNotSet,
    InvalidInput,
    InvalidRunState,
    RunNotFound,
    WaitTimeout,
    WorkflowNotFound,
)
from durable.models import TERMINAL
from durable.runtime import get_engine
from durable.store import store

logger = logging.getLogger("durable.events")

_MISSING: Any = object()


@dataclass(frozen=True)
class EventResult:
    """What :func:`publish_event` did."""

    event_id: str
    delivered: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    buffered: bool = False
    duplicate: bool = False


@dataclass(frozen=True)
class UpdateResult:
    """What :func:`update` did: ``accepted``, or not with the ``reason``."""

    accepted: bool
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.accepted


def publish_event(name: str, payload: Any = None, *, id: str | None = None) -> EventResult:
    """Publish named event ``name``.

    Every run waiting in ``ctx.wait_event(name, match=...)`` whose ``match`` is a
    subset of ``payload`` receives it; if none does, it is buffered once for
    the first matching waiter. Each workflow registered with
    ``on_event=[name]`` is started with the payload as input, under the run id
    ``<event id>:<workflow>``, so publishing the same ``id`` again starts and
    delivers nothing twice. All of it commits in one transaction.
    """
    _check_name(name, "event name")
    if name.startswith("run."):
        raise InvalidInput("event names starting with 'run.' are lifecycle events, published by the engine")
    event_id = _check_id(id, "event id") if id is not None else uuid.uuid4().hex
    settings = conf.get()
    payload = to_json(payload, f"payload of event {name!r}", max_bytes=settings.max_payload_bytes)
    now = runtime.now()
    started: list[str] = []
    refused: dict[str, str] = {}
    with transaction.atomic():
        outcome = store.publish_event(name, payload, event_id, now)
        if not outcome["duplicate"]:
            for wf in get_engine().registry.subscribers(name):
                run_id = f"{event_id[:200]}:{wf.name}"
                try:
                    value = clean_input(wf, payload, settings.max_payload_bytes)
                except InvalidInput as exc:
                    refused[wf.name] = str(exc)
                    logger.warning("event %s (%s) not started for %s: %s", name, event_id, wf.name, exc)
                    continue
                fields = run_fields(
                    wf, run_id, value, now=now, namespace=settings.default_namespace, tags=[f"event:{name}"]
                )
                if _create(fields):
                    started.append(run_id)
        store.wake(outcome["delivered"], now)
        _dispatch_after_commit(outcome["delivered"])
    return EventResult(
        event_id=event_id,
        delivered=outcome["delivered"],
        started=started,
        refused=refused,
        buffered=outcome["buffered"],
        duplicate=outcome["duplicate"],
    )


def update(run_id: str, name: str, arg: Any = None) -> UpdateResult:
    """Send update ``name`` to a run; the workflow's validator decides here, in the caller.

    Accepted updates are delivered (in order) to ``ctx.wait_update(name)``. A
    rejected update changes nothing. Unknown runs raise
    :class:`~durable.RunNotFound`; everything else is a rejection with a reason.
    """
    _check_id(run_id)
    _check_name(name, "update name")
    rec = store.get_run(run_id)
    if rec is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    if rec.status in TERMINAL:
        return UpdateResult(False, f"run {run_id!r} is {rec.status}")
    try:
        wf = get_engine().registry.get_workflow(rec.workflow, rec.version)
    except WorkflowNotFound as exc:
        return UpdateResult(False, str(exc))
    if name not in wf.updates:
        accepted = ", ".join(sorted(wf.updates)) or "none"
        return UpdateResult(False, f"workflow {wf.name!r} accepts no update named {name!r} (accepts: {accepted})")
    validator = wf.updates[name]
    if validator is not None:
        try:
            cleaned = validator(arg)
        except Exception as exc:  # noqa: BLE001 - the validator's refusal, whatever its type
            return UpdateResult(False, str(exc) or type(exc).__name__)
        if cleaned is not None:
            arg = cleaned
    try:
        value = to_json(arg, f"argument of update {name!r}", max_bytes=conf.get().max_payload_bytes)
    except InvalidInput as exc:
        return UpdateResult(False, str(exc))
    try:
        with transaction.atomic():
            if store.signal(run_id, UPDATE_TOKEN + name, value, runtime.now()):
                _dispatch_after_commit([run_id])
    except InvalidRunState as exc:
        return UpdateResult(False, str(exc))
    return UpdateResult(True)


def get_event(run_id: str, key: str, default: Any = _MISSING) -> Any:
    """The value a run published with ``ctx.set_event(key, value)`` (while running or after).

    Raises :class:`~durable.EventNotSet` when the run never set ``key`` and no
    ``default`` is given.
    """
    _check_id(run_id)
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"key must be a non-empty string, got {key!r}")
    rec = store.get_run(run_id)
    if rec is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    values = rec.query_values or {}
    if key in values:
        return values[key]
    if default is not _MISSING:
        return default
    raise EventNotSet(f"run {run_id!r} has not set {key!r}")


def wait_for_run(run_id: str, timeout: float = 30.0) -> RunInfo:
    """Block until ``run_id`` settles (following continue-as-new) and return its final run.

    For callers outside workflows (views, scripts, tests with a live worker).
    Raises :class:`~durable.WaitTimeout` after ``timeout`` seconds.
    """
    _check_id(run_id)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvalidInput(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        rec = store.resolve_run(run_id)
        if rec is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if rec.status in TERMINAL:
            return RunInfo.from_record(rec)
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"run {run_id!r} is still {rec.status} after {timeout}s")
        time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
        pause = min(pause * 2, 0.5)


def republish(
    run_id: str | None = None,
    *,
    workflow: str | None = None,
    ending: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    subscriber: str | None = None,
    limit: int = 100,
) -> dict[str, dict[str, str]]:
    """Publish settled runs' lifecycle events again, whether or not they are still owed.

    Select one run, or runs by source ``workflow``, ``ending`` ("completed" or
    "failed"), finish time range, at most ``limit``; optionally only to one
    ``subscriber``. Subscribers that failed (``where`` raised, input refused,
    start failed) are tried again; started ones are not started twice (their
    run ids are deterministic). A subscriber that does not take that ending is
    reported ``not_subscribed`` and nothing is marked. Returns
    ``{run_id: {subscriber: outcome}}``.
    """
    if run_id is not None:
        _check_id(run_id)
    if workflow is not None:
        _check_name(workflow, "workflow")
    if subscriber is not None:
        _check_name(subscriber, "subscriber")
    if ending not in (None, "completed", "failed"):
        raise InvalidInput(f"ending must be 'completed' or 'failed', got {ending!r}")
    for when, what in ((since, "since"), (until, "until")):
        if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
            raise InvalidInput(f"{what} must be a timezone-aware datetime")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidInput("limit must be an integer between 1 and 10000")
    if run_id is not None and store.get_run(run_id) is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    statuses = {"completed": ["completed"], "failed": ["failed", "dead"], None: ["completed", "failed", "dead"]}[ending]
    engine = get_engine()
    report: dict[str, dict[str, str]] = {}
    for target in store.republish_targets(
        run_id=run_id, workflow=workflow, statuses=statuses, since=since, until=until, limit=limit
    ):
        rec = store.get_run(target)
        if rec is None:
            continue
        end = lifecycle.ending_of(rec.status) or "completed"
        subs = [subscriber] if subscriber else lifecycle.subscribers_for(engine, rec.workflow, end)
        report[target] = lifecycle.publish(engine, target, only=subs, republish=True) if subs else {}
    return report
