"""Operator actions on limited step queues: the one place the admin and the API change them.

Each action calls a durable service function (``durable.configure_queue``,
``pause_queue``, ``resume_queue``) and writes one audit entry (``action`` is
the service function's name, ``params`` carries the queue's name and the
limits asked for). Errors of the :class:`~durable.DurableError` family become
a failed :class:`QueueOutcome` with a stable ``code``; anything else propagates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import durable
from durable.exceptions import DurableError
from durable_dashboard.operations import Outcome, audit, error_code


@dataclass(frozen=True)
class QueueOutcome:
    """What one action did to one queue: ``result`` is the queue as JSON (``durable.QueueInfo.as_json``)."""

    name: str
    ok: bool
    message: str
    result: Any = None
    code: str | None = None


def _configure(name: str, params: dict[str, Any]) -> tuple[str, Any]:
    info = durable.configure_queue(name, **params)
    return "limits changed", info.as_json()


def _pause(name: str, params: dict[str, Any]) -> tuple[str, Any]:
    return "paused", durable.pause_queue(name).as_json()


def _resume(name: str, params: dict[str, Any]) -> tuple[str, Any]:
    return "resumed", durable.resume_queue(name).as_json()


QUEUE_ACTIONS: dict[str, Callable[[str, dict[str, Any]], tuple[str, Any]]] = {
    "configure_queue": _configure,
    "pause_queue": _pause,
    "resume_queue": _resume,
}
LABELS = {"configure_queue": "Change limits of", "pause_queue": "Pause", "resume_queue": "Resume"}


def perform(action: str, name: str, params: dict[str, Any], *, user: Any, via: str) -> QueueOutcome:
    """Apply queue ``action`` to queue ``name`` through durable's service function, and audit it."""
    try:
        message, result = QUEUE_ACTIONS[action](name, params)
        outcome = QueueOutcome(name, True, message, result)
    except DurableError as exc:
        outcome = QueueOutcome(name, False, str(exc), None, error_code(exc))
    logged = Outcome(name, outcome.ok, outcome.message, None, outcome.code)
    audit(user, via, action, [], {"queue": name, **params}, [logged])
    return outcome
