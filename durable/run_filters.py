"""Filters and cursors of :func:`durable.list_runs`: parsed and checked before the store is asked."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from typing import Any

from durable.engine.serialization import to_json
from durable.engine.vocab import RunStatus
from durable.exceptions import InvalidInput
from durable.validation import check_aware, check_limit

OPS = ("eq", "ne", "lt", "lte", "gt", "gte", "in")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,99}$")
MAX_LIMIT = 1000


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


def check_statuses(status: str | list[str] | None) -> list[str]:
    """``status`` as a list of known run statuses (a single status or a list)."""
    statuses = [status] if isinstance(status, str) else list(status or [])
    for s in statuses:
        if s not in list(RunStatus):
            raise InvalidInput(f"unknown status {s!r}; use one of {[str(v) for v in RunStatus]}")
    return statuses


def check_filters(
    *,
    workflow: str | None,
    namespace: str | None,
    tag: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
    limit: int,
) -> tuple[datetime | None, datetime | None]:
    """Refuse malformed filters; returns the creation bounds in UTC."""
    for text, what in ((workflow, "workflow"), (namespace, "namespace"), (tag, "tag")):
        if text is not None and (not isinstance(text, str) or not text):
            raise InvalidInput(f"{what} must be a non-empty string")
    check_aware(created_after, "created_after")
    check_aware(created_before, "created_before")
    check_limit(limit, MAX_LIMIT)
    # Normalise to UTC: offsets Python accepts (up to ±23:59) exceed what PostgreSQL takes.
    after = created_after.astimezone(UTC) if created_after is not None else None
    before = created_before.astimezone(UTC) if created_before is not None else None
    return after, before
