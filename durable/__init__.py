"""django-durable: durable workflows for Django.

Public API. Decorators and exceptions are importable at any time; the service
functions (``start``, ``signal``...) are loaded on first use because they need
Django's app registry to be ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable.decorators import entity, step, workflow
from durable.engine.context import Call, Callback, ChildCall, WorkflowContext, call, child_call
from durable.engine.durations import parse_duration
from durable.engine.plan_entities import EntityOpRecord
from durable.engine.retry import Backoff
from durable.engine.singletons import Singleton
from durable.exceptions import (
    BreakpointNotFound,
    CallbackAlreadyCompleted,
    CallbackFailed,
    CallbackNotFound,
    CallbackTimeout,
    ChildFailed,
    ConfigurationError,
    DurableError,
    EntityNotFound,
    EntityOpFailed,
    EntityTimeout,
    EventNotSet,
    FatalError,
    GatherFailed,
    InvalidCallbackToken,
    InvalidInput,
    InvalidRunState,
    NonDeterminismError,
    QueueFull,
    QueueNotFound,
    RunFailed,
    RunNotFound,
    ScheduleExists,
    ScheduleNotFound,
    SignalTimeout,
    StepFailed,
    StepNotFound,
    WaitTimeout,
    WorkflowNotFound,
)
from durable.schedules.spec import Overlap, Schedule

if TYPE_CHECKING:
    from durable.api import (
        cancel,
        complete_callback,
        current_step,
        fail_callback,
        fork,
        get_run,
        heartbeat,
        redispatch_pending,
        requeue,
        resume_breakpoint,
        retry_with_input,
        signal,
        signal_with_start,
        start,
    )
    from durable.client import Client
    from durable.entities import call_entity, entity_ops, get_entity_state, signal_entity
    from durable.listing import list_runs
    from durable.messaging import (
        get_event,
        publish_event,
        republish,
        update,
        wait_for_run,
    )
    from durable.queues import QueueInfo, configure_queue, get_queue, list_queues, pause_queue, resume_queue
    from durable.results import EventResult, RunInfo, RunPage, UpdateResult
    from durable.schedules.info import ScheduleInfo
    from durable.schedules.service import (
        backfill_schedule,
        create_schedule,
        delete_schedule,
        get_schedule,
        list_schedules,
        pause_schedule,
        resume_schedule,
        sync_schedules,
        trigger_schedule,
        update_schedule,
    )

__all__ = [
    "Backoff",
    "BreakpointNotFound",
    "Call",
    "Callback",
    "CallbackAlreadyCompleted",
    "CallbackFailed",
    "CallbackNotFound",
    "CallbackTimeout",
    "ChildCall",
    "ChildFailed",
    "Client",
    "ConfigurationError",
    "DurableError",
    "EntityNotFound",
    "EntityOpFailed",
    "EntityOpRecord",
    "EntityTimeout",
    "EventNotSet",
    "EventResult",
    "FatalError",
    "GatherFailed",
    "InvalidCallbackToken",
    "InvalidInput",
    "InvalidRunState",
    "NonDeterminismError",
    "Overlap",
    "QueueFull",
    "QueueInfo",
    "QueueNotFound",
    "RunFailed",
    "RunInfo",
    "RunNotFound",
    "RunPage",
    "Schedule",
    "ScheduleExists",
    "ScheduleInfo",
    "ScheduleNotFound",
    "SignalTimeout",
    "Singleton",
    "StepFailed",
    "StepNotFound",
    "UpdateResult",
    "WaitTimeout",
    "WorkflowContext",
    "WorkflowNotFound",
    "backfill_schedule",
    "call",
    "call_entity",
    "cancel",
    "child_call",
    "complete_callback",
    "configure_queue",
    "create_schedule",
    "current_step",
    "delete_schedule",
    "entity",
    "entity_ops",
    "fail_callback",
    "fork",
    "get_entity_state",
    "get_event",
    "get_queue",
    "get_run",
    "get_schedule",
    "heartbeat",
    "list_queues",
    "list_runs",
    "list_schedules",
    "parse_duration",
    "pause_queue",
    "pause_schedule",
    "publish_event",
    "redispatch_pending",
    "republish",
    "requeue",
    "resume_breakpoint",
    "resume_queue",
    "resume_schedule",
    "retry_with_input",
    "signal",
    "signal_entity",
    "signal_with_start",
    "start",
    "step",
    "sync_schedules",
    "trigger_schedule",
    "update",
    "update_schedule",
    "wait_for_run",
    "workflow",
]

_LAZY = {
    "QueueInfo": "durable.queues",
    "configure_queue": "durable.queues",
    "get_queue": "durable.queues",
    "list_queues": "durable.queues",
    "pause_queue": "durable.queues",
    "resume_queue": "durable.queues",
    "ScheduleInfo": "durable.schedules.info",
    "backfill_schedule": "durable.schedules.service",
    "create_schedule": "durable.schedules.service",
    "delete_schedule": "durable.schedules.service",
    "get_schedule": "durable.schedules.service",
    "list_schedules": "durable.schedules.service",
    "pause_schedule": "durable.schedules.service",
    "resume_schedule": "durable.schedules.service",
    "sync_schedules": "durable.schedules.service",
    "trigger_schedule": "durable.schedules.service",
    "update_schedule": "durable.schedules.service",
    "Client": "durable.client",
    "RunInfo": "durable.results",
    "cancel": "durable.api",
    "complete_callback": "durable.api",
    "fail_callback": "durable.api",
    "resume_breakpoint": "durable.api",
    "current_step": "durable.api",
    "fork": "durable.api",
    "get_run": "durable.api",
    "heartbeat": "durable.api",
    "redispatch_pending": "durable.api",
    "requeue": "durable.api",
    "retry_with_input": "durable.api",
    "signal": "durable.api",
    "signal_with_start": "durable.api",
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
    "call_entity": "durable.entities",
    "entity_ops": "durable.entities",
    "get_entity_state": "durable.entities",
    "signal_entity": "durable.entities",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'durable' has no attribute {name!r}")
