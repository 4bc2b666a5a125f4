"""Service functions: the one way user code, the admin and the REST API act on runs.

Every function validates its arguments before touching the database and
raises a :class:`~durable.DurableError` subclass with a clear message on bad
input; nothing is written in that case. Work is announced to the transport
only after the caller's transaction commits (``transaction.on_commit``), so
``start()`` inside ``transaction.atomic()`` creates a run only if the caller's
own writes commit.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from durable import conf, runtime
from durable.engine.current_step import StepInfo
from durable.engine.current_step import current_step as _current_step
from durable.engine.current_step import heartbeat as _heartbeat
from durable.engine.new_runs import clean_input, run_fields
from durable.engine.ports import RunRecord
from durable.engine.serialization import to_json
from durable.exceptions import InvalidInput, InvalidRunState, RunNotFound, WorkflowNotFound
from durable.models import TERMINAL
from durable.runtime import get_engine
from durable.store import store

_ID = re.compile(r"^[^\s\x00-\x1f\x7f]{1,255}$")
_NAME = re.compile(r"^[^\s\x00-\x1f\x7f]{1,200}$")


@dataclass(frozen=True)
class RunInfo:
    """A snapshot of a run, as returned by :func:`get_run`."""

    id: str
    workflow: str
    version: int
    status: str
    namespace: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    tags: list[str] = field(default_factory=list)
    search_attributes: dict[str, Any] = field(default_factory=dict)
    parent_id: str | None = None
    retry_of: str | None = None
    continued_to: str | None = None
    wake_at: datetime | None = None
    recovery_attempts: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_record(cls, rec: RunRecord) -> RunInfo:
        return cls(
            id=rec.id,
            workflow=rec.workflow,
            version=rec.version,
            status=rec.status,
            namespace=rec.namespace,
            input=rec.input,
            output=rec.output,
            error=rec.error,
            tags=list(rec.tags or []),
            search_attributes=dict(rec.search_attributes or {}),
            parent_id=rec.parent_id,
            retry_of=rec.retry_of,
            continued_to=rec.continued_to,
            wake_at=rec.wake_at,
            recovery_attempts=rec.recovery_attempts,
            created_at=rec.created_at,
            updated_at=rec.updated_at,
            started_at=rec.started_at,
            finished_at=rec.finished_at,
        )


def _check_id(run_id: Any, what: str = "run_id") -> str:
    if not isinstance(run_id, str) or not _ID.match(run_id):
        raise InvalidInput(
            f"{what} must be a non-empty string of at most 255 characters without spaces, got {run_id!r}"
        )
    return run_id


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(f"{what} must be a non-empty string of at most 200 characters without spaces, got {name!r}")
    return name


def _check_tags(tags: Any) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)):
        raise InvalidInput(f"tags must be a list of strings, got {tags!r}")
    for tag in tags:
        if not isinstance(tag, str) or not tag or len(tag) > 100:
            raise InvalidInput(f"each tag must be a non-empty string of at most 100 characters, got {tag!r}")
    return list(dict.fromkeys(tags))


def start(
    workflow: Any,
    input: Any = None,
    *,
    run_id: str | None = None,
    tags: list[str] | None = None,
    namespace: str | None = None,
    search_attributes: dict[str, Any] | None = None,
    priority: int = 0,
) -> str:
    """Start ``workflow`` (a decorated function or a registered name) and return the run id.

    Idempotent on ``run_id``: starting an id that exists returns it and creates
    nothing. The run is created ``pending`` on the newest registered version and
    dispatched once the surrounding transaction (if any) commits.
    """
    settings = conf.get()
    wf = get_engine().registry.resolve_workflow(workflow)
    run_id = _check_id(run_id) if run_id is not None else uuid.uuid4().hex
    namespace = _check_name(namespace, "namespace") if namespace is not None else settings.default_namespace
    tags = _check_tags(tags)
    if search_attributes is None:
        search_attributes = {}
    if not isinstance(search_attributes, dict) or not all(isinstance(k, str) for k in search_attributes):
        raise InvalidInput("search_attributes must be a dict with string keys")
    search_attributes = to_json(search_attributes, "search_attributes", max_bytes=64 * 1024)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidInput(f"priority must be an integer, got {priority!r}")
    value = clean_input(wf, input, settings.max_payload_bytes)
    fields = run_fields(
        wf,
        run_id,
        value,
        now=runtime.now(),
        namespace=namespace,
        tags=tags,
        search_attributes=search_attributes,
        priority=priority,
    )
    _create(fields)
    return run_id


def _create(fields: dict[str, Any]) -> bool:
    """Insert a run (idempotent) and dispatch it after the caller's transaction commits.

    Outside a transaction, on a transport that runs turns in this process, the
    run is inserted already leased to this process and its first turn starts
    at once, without a separate acquire. If this process dies first, the
    lease expires and the orphan sweep takes the run, as for any turn.
    """
    run_id = fields["id"]
    engine = get_engine()
    if transaction.get_connection().in_atomic_block:
        with transaction.atomic():
            created = store.create_run(fields)
            if created:
                transaction.on_commit(lambda: engine.transport.dispatch_turn(run_id))
        return created
    if not engine.transport.takes_leased_runs():
        created = store.create_run(fields)
        if created:
            engine.transport.dispatch_turn(run_id)
        return created
    now = runtime.now()
    run = store.create_leased_run(fields, engine.owner, now, now + timedelta(seconds=engine.settings.lease))
    if run is not None:
        engine.transport.run_leased(run)
    return run is not None


def get_run(run_id: str, *, follow: bool = False) -> RunInfo:
    """The run's current state; raises :class:`~durable.RunNotFound` for an unknown id.

    With ``follow=True``, a run that continued as new is followed to the
    latest run of its chain.
    """
    _check_id(run_id)
    rec = store.get_run(run_id)
    if rec is not None and follow:
        while rec is not None and rec.continued_to:
            rec = store.get_run(rec.continued_to)
    if rec is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    return RunInfo.from_record(rec)


def signal(run_id: str, name: str, payload: Any = None) -> None:
    """Send signal ``name`` with a JSON ``payload`` to a run.

    A run already waiting for it wakes up; otherwise the signal is buffered
    (first in, first out per name) until the run waits for it. Raises
    :class:`~durable.RunNotFound` for an unknown run and
    :class:`~durable.InvalidRunState` for a finished one.
    """
    _check_id(run_id)
    _check_name(name, "signal name")
    if name.startswith("__"):
        raise InvalidInput(f"signal names starting with '__' are reserved, got {name!r}")
    payload = to_json(payload, f"payload of signal {name!r}", max_bytes=conf.get().max_payload_bytes)
    with transaction.atomic():
        woke = store.signal(run_id, name, payload, runtime.now())
        if woke:
            engine = get_engine()
            transaction.on_commit(lambda: engine.transport.dispatch_turn(run_id))


def cancel(run_id: str, *, compensate: bool = False) -> bool:
    """Cancel a run and its children. True if this call cancelled it, False if it had ended.

    Idempotent. A cancelled run never starts another step: its pending steps
    are refused by workers, and a turn in progress loses its lease and writes
    nothing more. With ``compensate=True`` the run (and its children) first
    undo their completed steps that declared a compensation, newest first,
    then end ``cancelled``.
    """
    _check_id(run_id)
    if not isinstance(compensate, bool):
        raise InvalidInput(f"compensate must be a boolean, got {compensate!r}")
    with transaction.atomic():
        done, woken = store.cancel(run_id, runtime.now(), compensate)
        _dispatch_after_commit(woken)
    return done


def _dispatch_after_commit(run_ids: list[str]) -> None:
    if run_ids:
        engine = get_engine()

        def dispatch() -> None:
            for rid in run_ids:
                engine.transport.dispatch_turn(rid)

        transaction.on_commit(dispatch)


def heartbeat(progress: Any = None) -> bool:
    """From inside a dispatched step: record liveness and optional JSON ``progress``.

    Throttled to one write per ``DURABLE["HEARTBEAT_INTERVAL"]`` per step and
    renews the step's execution lease. Never raises; returns True if written.
    """
    return _heartbeat(get_engine(), progress)


def current_step() -> StepInfo | None:
    """Inside a dispatched step: its run id, position, attempt and stable ``step_id``."""
    return _current_step()


def requeue(run_id: str) -> None:
    """Put a ``failed`` or ``dead`` run back to ``pending`` so it runs again.

    Failed steps really execute again (their failure is not replayed), the
    recovery count is reset and the execution timeout starts over. Raises
    :class:`~durable.InvalidRunState` for a run in any other status.
    """
    _check_id(run_id)
    rec = store.get_run(run_id)
    if rec is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    now = runtime.now()
    deadline = None
    try:
        wf = get_engine().registry.get_workflow(rec.workflow, rec.version)
        deadline = now + timedelta(seconds=wf.timeout) if wf.timeout else None
    except WorkflowNotFound:
        pass  # it will be parked as blocked until its code is deployed
    with transaction.atomic():
        _dispatch_after_commit(store.requeue(run_id, now, deadline))


def redispatch_pending(run_id: str) -> int:
    """Dispatch again every pending step of an active run (same step ids); returns how many.

    Safe to call at any time: a worker that already has the step settles it
    first and the re-delivery then finds nothing to do.
    """
    _check_id(run_id)
    engine = get_engine()
    now = runtime.now()
    redelivery = timedelta(seconds=engine.settings.step_lease or engine.settings.reconcile_after)
    with transaction.atomic():
        rows = store.pending_steps(run_id, now, now + redelivery)

        def dispatch() -> None:
            for seq, queue in rows:
                engine.transport.dispatch_step(run_id, seq, queue)

        transaction.on_commit(dispatch)
    return len(rows)


def retry_with_input(run_id: str, input: Any) -> str:
    """Start a new run of a failed (or dead) run's workflow with corrected ``input``.

    The new run is ``<run_id>~retry~<hex>``, with a clean history, the same
    namespace, tags and parent, on the newest version of the workflow; it
    records the original in ``retry_of``. Returns the new run id.
    """
    _check_id(run_id)
    origin = store.get_run(run_id)
    if origin is None:
        raise RunNotFound(f"no run with id {run_id!r}")
    if origin.status not in ("failed", "dead"):
        raise InvalidRunState(f"run {run_id!r} is {origin.status}; only failed or dead runs can be retried")
    wf = get_engine().registry.get_workflow(origin.workflow)
    value = clean_input(wf, input, conf.get().max_payload_bytes)
    new_id = f"{run_id[:230]}~retry~{uuid.uuid4().hex[:12]}"
    _create(
        run_fields(
            wf,
            new_id,
            value,
            now=runtime.now(),
            namespace=origin.namespace,
            tags=list(origin.tags),
            search_attributes=dict(origin.search_attributes),
            priority=origin.priority,
            parent_id=origin.parent_id,
            retry_of=origin.id,
        )
    )
    return new_id
