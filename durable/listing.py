"""``durable.list_runs``: filter and page through runs, newest first."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from durable.api import RunInfo
from durable.engine.serialization import to_json
from durable.exceptions import InvalidInput
from durable.models import RunStatus
from durable.store import store

OPS = ("eq", "ne", "lt", "lte", "gt", "gte", "in")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,99}$")
MAX_LIMIT = 1000


@dataclass(frozen=True)
class RunPage:
    """One page of :func:`list_runs`; pass ``next_cursor`` back to get the next one."""

    items: list[RunInfo]
    next_cursor: str | None


def parse_attribute_filters(attributes: dict[str, Any] | None) -> list[tuple[str, str, Any]]:
    """``{"amount__gte": 10, "country": "PT"}`` → ``[("amount", "gte", 10), ("country", "eq", "PT")]``."""
    if attributes is None:
        return []
    if not isinstance(attributes, dict):
        raise InvalidInput("attributes must be a dict like {'amount__gte': 10}")
    parsed = []
    for raw, value in attributes.items():
        if not isinstance(raw, str):
            raise InvalidInput(f"attribute filter keys must be strings, got {raw!r}")
        key, _, op = raw.partition("__")
        op = op or "eq"
        if not _KEY.match(key) or "__" in key:
            raise InvalidInput(f"invalid attribute name {key!r}")
        if op not in OPS:
            raise InvalidInput(f"invalid attribute comparison {op!r} in {raw!r}; use one of {OPS}")
        value = to_json(value, f"attribute filter {raw!r}")
        if op == "in" and not isinstance(value, list):
            raise InvalidInput(f"{raw!r} needs a list of values")
        parsed.append((key, op, value))
    return parsed


def encode_cursor(created_at: datetime, run_id: str) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{run_id}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        created, _, run_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        when = datetime.fromisoformat(created)
        when = when.astimezone(UTC) if when.tzinfo is not None else when
    except (ValueError, UnicodeDecodeError, OverflowError) as exc:
        raise InvalidInput(f"invalid cursor {cursor!r}") from exc
    if not run_id or when.tzinfo is None:
        raise InvalidInput(f"invalid cursor {cursor!r}")
    return when, run_id


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
    statuses = [status] if isinstance(status, str) else list(status or [])
    for s in statuses:
        if s not in list(RunStatus):
            raise InvalidInput(f"unknown status {s!r}; use one of {[str(v) for v in RunStatus]}")
    for text, what in ((workflow, "workflow"), (namespace, "namespace"), (tag, "tag")):
        if text is not None and (not isinstance(text, str) or not text):
            raise InvalidInput(f"{what} must be a non-empty string")
    for when, what in ((created_after, "created_after"), (created_before, "created_before")):
        if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
            raise InvalidInput(f"{what} must be a timezone-aware datetime")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer between 1 and {MAX_LIMIT}")
    # Normalise to UTC: offsets Python accepts (up to ±23:59) exceed what PostgreSQL takes.
    created_after = created_after.astimezone(UTC) if created_after is not None else None
    created_before = created_before.astimezone(UTC) if created_before is not None else None
    after = decode_cursor(cursor) if cursor is not None else None
    records = store.list_runs(
        statuses=statuses,
        workflow=workflow,
        namespace=namespace,
        tag=tag,
        attributes=parse_attribute_filters(attributes),
        created_after=created_after,
        created_before=created_before,
        after=after,
        limit=limit + 1,
    )
    items = [RunInfo.from_record(r) for r in records[:limit]]
    next_cursor = None
    if len(records) > limit and items:
        last = records[limit - 1]
        next_cursor = encode_cursor(last.created_at, last.id)
    return RunPage(items, next_cursor)
