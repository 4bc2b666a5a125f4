"""django-durable: durable workflows for Django.

Public API. Decorators and exceptions are importable at any time; the service
functions (``start``, ``signal``...) are loaded on first use because they need
Django's app registry to be ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable.decorators import step, workflow
from durable.engine.context import Call, ChildCall, WorkflowContext, call, child_call
from durable.engine.durations import parse_duration
from durable.engine.retry import Backoff
from durable.exceptions import (
    ChildFailed,
    ConfigurationError,
    DurableError,
    EventNotSet,
    FatalError,
    GatherFailed,
    InvalidInput,
    InvalidRunState,
    NonDeterminismError,
    RunFailed,
    RunNotFound,
    SignalTimeout,
    StepFailed,
    StepNotFound,
    WaitTimeout,
    WorkflowNotFound,
)

if TYPE_CHECKING:
    from durable.api import (
        cancel,
        current_step,
        get_run,
        heartbeat,
        redispatch_pending,
        requeue,
        retry_with_input,
        signal,
        start,
    )
    from durable.client import Client
    from durable.listing import list_runs
    from durable.messaging import (
        get_event,
        publish_event,
        republish,
        update,
        wait_for_run,
    )
    from durable.results import EventResult, RunInfo, RunPage, UpdateResult

__all__ = [
    "Backoff",
    "Call",
    "ChildCall",
    "ChildFailed",
    "Client",
    "ConfigurationError",
    "DurableError",
    "EventNotSet",
    "EventResult",
    "FatalError",
    "GatherFailed",
    "InvalidInput",
    "InvalidRunState",
    "NonDeterminismError",
    "RunFailed",
    "RunInfo",
    "RunNotFound",
    "RunPage",
    "SignalTimeout",
    "StepFailed",
    "StepNotFound",
    "UpdateResult",
    "WaitTimeout",
    "WorkflowContext",
    "WorkflowNotFound",
    "call",
    "cancel",
    "child_call",
    "current_step",
    "get_event",
    "get_run",
    "heartbeat",
    "list_runs",
    "parse_duration",
    "publish_event",
    "redispatch_pending",
    "republish",
    "requeue",
    "retry_with_input",
    "signal",
    "start",
    "step",
    "update",
    "wait_for_run",
    "workflow",
]

_LAZY = {
    "Client": "durable.client",
    "RunInfo": "durable.results",
    "cancel": "durable.api",
    "current_step": "durable.api",
    "get_run": "durable.api",
    "heartbeat": "durable.api",
    "redispatch_pending": "durable.api",
    "requeue": "durable.api",
    "retry_with_input": "durable.api",
    "signal": "durable.api",
    "start": "durable.api",
    "RunPage": "durable.results",
    "list_runs": "durable.listing",
    "EventResult": "durable.results",
    "UpdateResult": "durable.results",
    "get_event": "durable.messaging",
    "publish_event": "durable.messaging",
    "update": "durable.messaging",
    "wait_for_run": "durable.messaging",
    "republish": "durable.messaging",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'durable' has no attribute {name!r}")
