"""``durable.list_runs``: filter and page through runs, newest first (a wrapper over the default client)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durable import runtime
from durable.results import RunPage as RunPage


def list_runs(
    *,
    status: str | list[str] | None = None,
    workflow: str | None = None,
    namespace: str | None = None,
    tag: str | None = None,
    attributes: dict[str, Any] | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> RunPage:
    """Runs matching every given filter, newest first, ``limit`` at a time.

    ``attributes`` compares search attributes: ``{"amount__gte": 10,
    "country__in": ["PT", "ES"], "tier__ne": "free"}`` (eq, ne, lt, lte, gt,
    gte, in). A run without the attribute never matches a comparison on it.
    """
    return runtime.client().list_runs(
        status=status,
        workflow=workflow,
        namespace=namespace,
        tag=tag,
        attributes=attributes,
        created_after=created_after,
        created_before=created_before,
        limit=limit,
        cursor=cursor,
    )
