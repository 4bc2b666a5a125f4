"""Building new runs: input validation and the row a new run starts as.

Shared by :func:`durable.start`, children, continue-as-new, event-started
runs and retries, so every way of creating a run validates the same way.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from durable.engine.ports import RunRecord
from durable.engine.registry import WorkflowDef
from durable.engine.serialization import to_json
from durable.engine.singletons import singleton_columns
from durable.engine.vocab import RunStatus
from durable.exceptions import InvalidInput


def clean_input(wf: WorkflowDef, value: Any, max_bytes: int) -> Any:
    """Run the workflow's validator and return the JSON input, or raise InvalidInput."""
    if wf.validate is not None:
        try:
            cleaned = wf.validate(value)
        except Exception as exc:
            raise InvalidInput(f"input refused by workflow {wf.name!r}: {exc}") from exc
        if cleaned is not None:
            value = cleaned
    if not wf.takes_input and value is not None:
        raise InvalidInput(f"workflow {wf.name!r} takes no input, got {value!r}")
    return to_json(value, f"input of workflow {wf.name!r}", max_bytes=max_bytes)


def run_fields(
    wf: WorkflowDef,
    run_id: str,
    value: Any,
    *,
    now: datetime,
    namespace: str,
    tags: list[str] | None = None,
    search_attributes: dict[str, Any] | None = None,
    priority: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """The columns of a new ``pending`` run of ``wf`` (a singleton's key and limit included).

    Raises :class:`~durable.InvalidInput` when ``wf`` is a singleton and ``value`` has no key.
    """
    return {
        "id": run_id,
        "workflow": wf.name,
        "version": wf.version,
        "status": RunStatus.PENDING,
        "namespace": namespace,
        "input": value,
        "tags": list(dict.fromkeys([*wf.tags, *(tags or [])])),
        "search_attributes": search_attributes or {},
        "priority": priority,
        "created_at": now,
        "updated_at": now,
        "deadline_at": now + timedelta(seconds=wf.timeout) if wf.timeout else None,
        **singleton_columns(wf.singleton, wf.name, value),
        **extra,
    }


def successor_fields(
    wf: WorkflowDef, run_id: str, value: Any, origin: RunRecord, *, now: datetime, **extra: Any
) -> dict[str, Any]:
    """The columns of a new run that carries on from ``origin`` (continue-as-new, retry, fork).

    It keeps the origin's namespace, tags, search attributes and priority; ``extra`` adds its lineage.
    """
    return run_fields(
        wf,
        run_id,
        value,
        now=now,
        namespace=origin.namespace,
        tags=list(origin.tags),
        search_attributes=dict(origin.search_attributes),
        priority=origin.priority,
        **extra,
    )
