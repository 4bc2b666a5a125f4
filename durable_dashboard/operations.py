"""Operator actions: the one place the admin and the API change runs.

Every action calls a durable service function (``import durable``), never the
models, and is written to the audit log with its per-run outcome. Errors of the
:class:`~durable.DurableError` family become a failed :class:`Outcome` with a
stable ``code``; anything else (a database outage) propagates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.utils.translation import gettext_lazy as _

import durable
from durable.exceptions import (
    BreakpointNotFound,
    CallbackAlreadyCompleted,
    CallbackNotFound,
    DurableError,
    EntityNotFound,
    EventNotSet,
    InvalidCallbackToken,
    InvalidInput,
    InvalidRunState,
    QueueFull,
    QueueNotFound,
    RunNotFound,
    ScheduleExists,
    ScheduleNotFound,
    WorkflowNotFound,
)
from durable_dashboard.models import AuditEntry


class UpdateRejected(DurableError):
    """The workflow refused an update (unknown name, validator, finished run)."""


ERROR_CODES: tuple[tuple[type[Exception], str], ...] = (
    (RunNotFound, "run_not_found"),
    (ScheduleNotFound, "schedule_not_found"),
    (QueueNotFound, "queue_not_found"),
    (EntityNotFound, "entity_not_found"),
    (ScheduleExists, "schedule_exists"),
    (EventNotSet, "event_not_set"),
    (InvalidCallbackToken, "invalid_callback_token"),
    (CallbackNotFound, "callback_not_found"),
    (CallbackAlreadyCompleted, "callback_already_completed"),
    (BreakpointNotFound, "breakpoint_not_found"),
    (UpdateRejected, "update_rejected"),
    (WorkflowNotFound, "workflow_not_found"),
    (InvalidInput, "invalid_input"),
    (InvalidRunState, "invalid_run_state"),
    (QueueFull, "queue_full"),
    (DurableError, "durable_error"),
)


def error_code(exc: Exception) -> str:
    for cls, code in ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return "error"


@dataclass(frozen=True)
class Outcome:
    """What one action did to one run."""

    run_id: str
    ok: bool
    message: str
    result: Any = None
    code: str | None = None
    exception: Exception | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("exception")
        return data


# -- the actions: (run_id, params) -> (message, result) -----------------------------------


def _requeue(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    durable.requeue(run_id)
    return "requeued", None


def _redispatch(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    count = durable.redispatch_pending(run_id)
    return f"redispatched {count} pending step(s)", {"redispatched": count}


def _cancel(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    cancelled = durable.cancel(run_id)
    return ("cancelled" if cancelled else "already ended, nothing to cancel"), {"cancelled": cancelled}


def _cancel_compensate(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    cancelled = durable.cancel(run_id, compensate=True)
    return ("cancelled, compensating" if cancelled else "already ended, nothing to cancel"), {"cancelled": cancelled}


def _retry(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    new_id = durable.retry_with_input(run_id, params.get("input"))
    return f"retried as {new_id}", {"new_run_id": new_id}


def _fork(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    new_id = durable.fork(run_id, params["from_seq"], input=params.get("input"))
    return f"rerun from position {params['from_seq']} as {new_id}", {"new_run_id": new_id}


def _signal(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    durable.signal(run_id, params["name"], params.get("payload"))
    return f"signal {params['name']!r} sent", None


def _update(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    outcome = durable.update(run_id, params["name"], params.get("arg"))
    if not outcome.accepted:
        raise UpdateRejected(f"update {params['name']!r} rejected: {outcome.reason}")
    return f"update {params['name']!r} accepted", {"accepted": True}


def _republish(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    report = durable.republish(run_id).get(run_id, {})
    if not report:
        return "no lifecycle subscriber to republish to", {"subscribers": {}}
    summary = ", ".join(f"{name}: {outcome}" for name, outcome in sorted(report.items()))
    return f"lifecycle events republished ({summary})", {"subscribers": report}


def _continue(run_id: str, params: dict[str, Any]) -> tuple[str, Any]:
    label = durable.resume_breakpoint(run_id)
    return f"continued past breakpoint {label!r}", {"breakpoint": label}


RUN_ACTIONS: dict[str, Callable[[str, dict[str, Any]], tuple[str, Any]]] = {
    "requeue": _requeue,
    "redispatch": _redispatch,
    "cancel": _cancel,
    "cancel_compensate": _cancel_compensate,
    "retry": _retry,
    "fork": _fork,
    "signal": _signal,
    "update": _update,
    "republish": _republish,
    "continue": _continue,
}

LABELS = {
    "start": _("Start"),
    "requeue": _("Requeue"),
    "redispatch": _("Redispatch pending steps"),
    "cancel": _("Cancel"),
    "cancel_compensate": _("Cancel with undo (compensate)"),
    "retry": _("Retry with edited input"),
    "fork": _("Rerun from here"),
    "signal": _("Send signal"),
    "update": _("Send update"),
    "republish": _("Republish lifecycle events"),
    "continue": _("Continue past the breakpoint"),
}


def get_event(run_id: str, key: str) -> Any:
    """A run's query value ``key`` (``ctx.set_event``); a read, not audited."""
    return durable.get_event(run_id, key)


def _clip(value: Any, limit: int = 4000) -> Any:
    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return value
    return {"truncated": True, "preview": text[:limit]}


def audit(
    user: Any,
    via: str,
    action: str,
    run_ids: list[str],
    params: dict[str, Any],
    outcomes: list[Outcome],
    *,
    reason: str = "",
    username: str | None = None,
) -> AuditEntry:
    """Write one audit entry for ``action`` on ``run_ids``.

    ``username`` names who acted when there is no Django user (the OS user of a
    management command); otherwise it is the user's own.
    """
    authenticated = bool(user and getattr(user, "is_authenticated", False))
    if username is None:
        username = user.get_username() if authenticated else ""
    return AuditEntry.objects.create(
        user=user if authenticated else None,
        username=username[:150],
        via=via,
        action=action,
        run_ids=run_ids,
        params=_clip(params),
        results=[{"run_id": o.run_id, "ok": o.ok, "message": o.message[:500], "code": o.code} for o in outcomes],
        ok=all(o.ok for o in outcomes),
        reason=reason,
    )


def perform(
    action: str,
    run_ids: Iterable[str],
    params: dict[str, Any],
    *,
    user: Any,
    via: str,
    reason: str = "",
    username: str | None = None,
) -> list[Outcome]:
    """Apply ``action`` to each run, one service call per run, and audit the whole batch with ``reason``."""
    fn = RUN_ACTIONS[action]
    ids = list(run_ids)
    outcomes = []
    for run_id in ids:
        try:
            message, result = fn(run_id, params)
            outcomes.append(Outcome(run_id, True, message, result))
        except DurableError as exc:
            outcomes.append(Outcome(run_id, False, str(exc), None, error_code(exc), exc))
    audit(user, via, action, ids, params, outcomes, reason=reason, username=username)
    return outcomes


def start(params: dict[str, Any], *, user: Any, via: str, username: str | None = None) -> Outcome:
    """Start a run with :func:`durable.start` (idempotent on ``run_id``) and audit it."""
    kwargs = {k: params[k] for k in ("run_id", "tags", "namespace", "search_attributes", "priority") if k in params}
    try:
        run_id = durable.start(params["workflow"], params.get("input"), **kwargs)
        outcome = Outcome(run_id, True, "started", {"run_id": run_id})
    except DurableError as exc:
        outcome = Outcome(params.get("run_id") or "", False, str(exc), None, error_code(exc), exc)
    audit(user, via, "start", [outcome.run_id] if outcome.run_id else [], params, [outcome], username=username)
    return outcome
