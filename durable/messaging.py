"""Talking to runs from outside: named events, updates, published values, waiting for a result.

Service functions like those of :mod:`durable.api`: thin wrappers over the
default :class:`~durable.client.Client`, validated before anything is written,
dispatch after the caller's transaction commits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durable import runtime
from durable.client.messages import MISSING as _MISSING
from durable.results import EventResult as EventResult
from durable.results import RunInfo
from durable.results import UpdateResult as UpdateResult


def publish_event(name: str, payload: Any = None, *, id: str | None = None) -> EventResult:
    """Publish named event ``name``.

    Every run waiting in ``ctx.wait_event(name, match=...)`` whose ``match`` is a
    subset of ``payload`` receives it; if none does, it is buffered once for
    the first matching waiter. Each workflow registered with
    ``on_event=[name]`` is started with the payload as input, under the run id
    ``<event id>:<workflow>``, so publishing the same ``id`` again starts and
    delivers nothing twice. All of it commits in one transaction.
    """
    return runtime.client().publish_event(name, payload, id=id)


def update(run_id: str, name: str, arg: Any = None) -> UpdateResult:
    """Send update ``name`` to a run; the workflow's validator decides here, in the caller.

    Accepted updates are delivered (in order) to ``ctx.wait_update(name)``. A
    rejected update changes nothing. Unknown runs raise
    :class:`~durable.RunNotFound`; everything else is a rejection with a reason.
    """
    return runtime.client().update(run_id, name, arg)


def get_event(run_id: str, key: str, default: Any = _MISSING) -> Any:
    """The value a run published with ``ctx.set_event(key, value)`` (while running or after).

    Raises :class:`~durable.EventNotSet` when the run never set ``key`` and no
    ``default`` is given.
    """
    return runtime.client().get_event(run_id, key, default)


def wait_for_run(run_id: str, timeout: float = 30.0) -> RunInfo:
    """Block until ``run_id`` settles (following continue-as-new) and return its final run.

    For callers outside workflows (views, scripts, tests with a live worker).
    Raises :class:`~durable.WaitTimeout` after ``timeout`` seconds.
    """
    return runtime.client().wait_for_run(run_id, timeout)


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
    return runtime.client().republish(
        run_id, workflow=workflow, ending=ending, since=since, until=until, subscriber=subscriber, limit=limit
    )
