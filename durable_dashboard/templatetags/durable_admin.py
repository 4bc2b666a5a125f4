"""Template filters of the durable admin: one timestamp format, one-line JSON previews."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone

from durable.display import format_duration, format_time

register = template.Library()


@register.filter
def dtime(value: datetime | None) -> str:
    """A time as ``2026-12-01 10:51:02 UTC`` in the current timezone (``—`` for none)."""
    if not isinstance(value, datetime):
        return "—"
    return format_time(value, timezone.get_current_timezone())


@register.filter
def json_preview(value: Any, width: int = 60) -> str:
    """A value as one line of JSON, cut at ``width`` characters."""
    text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@register.filter
def json_size(value: Any) -> int:
    """How long the value is as JSON text (to decide whether a cell starts collapsed)."""
    return len(json.dumps(value, default=str))


@register.filter
def duration(value: timedelta | None) -> str:
    """A duration as everywhere in the admin (``12.345s``, ``3m 04s``)."""
    return format_duration(value)
