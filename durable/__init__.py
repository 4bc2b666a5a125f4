"""django-durable: durable workflows for Django.

Public API. Decorators and exceptions are importable at any time; the service
functions (``start``, ``signal``...) are loaded on first use because they need
Django's app registry to be ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable.engine.context import WorkflowContext
from durable.engine.durations import parse_duration
from durable.engine.registry import step, workflow
from durable.engine.retry import Backoff
from durable.exceptions import (
    ConfigurationError,
    DurableError,
    FatalError,
    InvalidInput,
    InvalidRunState,
    NonDeterminismError,
    RunNotFound,
    SignalTimeout,
    StepFailed,
    StepNotFound,
    WorkflowNotFound,
)

if TYPE_CHECKING:
    from durable.api import (
        RunInfo,
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

__all__ = [
    "Backoff",
    "ConfigurationError",
    "DurableError",
    "FatalError",
    "InvalidInput",
    "InvalidRunState",
    "NonDeterminismError",
    "RunInfo",
    "RunNotFound",
    "SignalTimeout",
    "StepFailed",
    "StepNotFound",
    "WorkflowContext",
    "WorkflowNotFound",
    "cancel",
    "current_step",
    "get_run",
    "heartbeat",
    "parse_duration",
    "redispatch_pending",
    "requeue",
    "retry_with_input",
    "signal",
    "start",
    "step",
    "workflow",
]

_LAZY = {
    "RunInfo",
    "cancel",
    "current_step",
    "get_run",
    "heartbeat",
    "redispatch_pending",
    "requeue",
    "retry_with_input",
    "signal",
    "start",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from durable import api

        return getattr(api, name)
    raise AttributeError(f"module 'durable' has no attribute {name!r}")
