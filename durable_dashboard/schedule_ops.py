"""Operator actions on schedules: the one place the admin and the API change them.

Each action calls a durable service function (``durable.pause_schedule``...)
and writes one audit entry (``action`` is the service function's name,
``params`` carries the key, ``run_ids`` the runs it started). Errors of the
:class:`~durable.DurableError` family become a failed :class:`ScheduleOutcome`
with a stable ``code`` (``operations.error_code``); anything else propagates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import durable
from durable.exceptions import DurableError
from durable_dashboard.operations import Outcome, audit, error_code


@dataclass(frozen=True)
class ScheduleOutcome:
    """What one action did to one schedule: ``result`` is JSON (the schedule, or the runs started)."""

    key: str
    ok: bool
    message: str
    result: Any = None
    code: str | None = None


def _create(key: str, params: dict[str, Any]) -> tuple[str, Any, list[str]]:
    fields = {k: v for k, v in params.items() if k != "workflow"}
    info = durable.create_schedule(key, params["workflow"], **fields)
    return "created", info.as_dict(), []


def _update(key: str, params: dict[str, Any]) -> tuple[str, Any, list[str]]:
    return "updated", durable.update_schedule(key, **params).as_dict(), []


def _delete(key: str, params: dict[str, Any]) -> tuple[str, Any, list[str]]:
    durable.delete_schedule(key)
    return "deleted", None, []


def _pause(key: str, params: dict[str, Any]) -> tuple[str, Any, list[str]]:
    return "paused", durable.pause_schedule(key).as_dict(), []


def _resume(key: str, params: dict[str, Any]) -> tuple[str, Any, list[str]]:
    return "resumed", durable.resume_schedule(key).as_dict(), []


def _trigger(key: str, params: dict[str, Any]) -> tuple[str, Any, list[str]]:
    run_id = durable.trigger_schedule(key)
    return f"triggered run {run_id}", {"run_ids": [run_id]}, [run_id]


def _backfill(key: str, params: dict[str, Any]) -> tuple[str, Any, list[str]]:
    run_ids = durable.backfill_schedule(key, params["start"], params["end"])
    return f"backfilled {len(run_ids)} window(s)", {"run_ids": run_ids}, run_ids


SCHEDULE_ACTIONS: dict[str, Callable[[str, dict[str, Any]], tuple[str, Any, list[str]]]] = {
    "create_schedule": _create,
    "update_schedule": _update,
    "delete_schedule": _delete,
    "pause_schedule": _pause,
    "resume_schedule": _resume,
    "trigger_schedule": _trigger,
    "backfill_schedule": _backfill,
}
LABELS = {
    "create_schedule": "Create",
    "update_schedule": "Edit",
    "delete_schedule": "Delete",
    "pause_schedule": "Pause",
    "resume_schedule": "Resume",
    "trigger_schedule": "Trigger now",
    "backfill_schedule": "Backfill",
}


def perform(action: str, key: str, params: dict[str, Any], *, user: Any, via: str) -> ScheduleOutcome:
    """Apply schedule ``action`` to ``key`` through durable's service function, and audit it."""
    run_ids: list[str] = []
    try:
        message, result, run_ids = SCHEDULE_ACTIONS[action](key, params)
        outcome = ScheduleOutcome(key, True, message, result)
    except DurableError as exc:
        outcome = ScheduleOutcome(key, False, str(exc), None, error_code(exc))
    logged = Outcome(key, outcome.ok, outcome.message, None, outcome.code)
    audit(user, via, action, run_ids, {"key": key, **params}, [logged])
    return outcome
