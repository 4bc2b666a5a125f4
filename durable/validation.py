"""Argument checks shared by the client's operations.

Each check raises :class:`~durable.InvalidInput` with a message naming the
argument and what was wrong, and returns the value as the client uses it.
They run before anything is written: a refused call changes nothing.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from durable.exceptions import InvalidInput

_ID = re.compile(r"^[^\s\x00-\x1f\x7f]{1,255}$")
_NAME = re.compile(r"^[^\s\x00-\x1f\x7f]{1,200}$")


def check_id(run_id: Any, what: str = "run_id") -> str:
    """A run or event id: 1 to 255 characters, no whitespace or control characters."""
    if not isinstance(run_id, str) or not _ID.match(run_id):
        raise InvalidInput(
            f"{what} must be a non-empty string of at most 255 characters without spaces, got {run_id!r}"
        )
    return run_id


def check_name(name: Any, what: str) -> str:
    """A signal, event, update, namespace or workflow name: 1 to 200 characters, no whitespace."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(f"{what} must be a non-empty string of at most 200 characters without spaces, got {name!r}")
    return name


def check_tags(tags: Any) -> list[str]:
    """A list of tags (each 1 to 100 characters), without duplicates, in order."""
    if tags is None:
        return []
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)):
        raise InvalidInput(f"tags must be a list of strings, got {tags!r}")
    for tag in tags:
        if not isinstance(tag, str) or not tag or len(tag) > 100:
            raise InvalidInput(f"each tag must be a non-empty string of at most 100 characters, got {tag!r}")
    return list(dict.fromkeys(tags))


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidInput(f"priority must be an integer, got {priority!r}")
    return priority


def check_timeout(timeout: Any) -> float:
    """A non-negative number of (real) seconds."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvalidInput(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    return timeout


def check_aware(when: Any, what: str) -> datetime | None:
    """None, or a timezone-aware datetime."""
    if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
        raise InvalidInput(f"{what} must be a timezone-aware datetime")
    return when


def check_limit(limit: Any, maximum: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidInput(f"limit must be an integer between 1 and {maximum}")
    return limit
