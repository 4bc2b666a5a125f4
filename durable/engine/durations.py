"""Parse human durations: ``"500ms"``, ``"30s"``, ``"2h"``, ``"7d"``, numbers, timedeltas."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from durable.exceptions import InvalidInput

Duration = str | int | float | timedelta

_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|sec|min|s|m|h|d|w)")
_WHOLE = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s*(?:ms|sec|min|s|m|h|d|w)\s*)+$")


def parse_duration(value: Duration) -> timedelta:
    """Return ``value`` as a non-negative timedelta.

    Accepts a timedelta, a number of seconds, or a string of one or more
    ``<number><unit>`` parts (``"1h30m"``); units are ms, s, m, h, d, w.
    Anything else raises :class:`~durable.InvalidInput`.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise InvalidInput(f"a duration cannot be a boolean: {value!r}")
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if not _WHOLE.match(text):
            raise InvalidInput(
                f"invalid duration {value!r}: use a number of seconds or parts like '500ms', '30s', '5m', '2h', '7d'"
            )
        seconds = sum(float(num) * _UNITS[unit] for num, unit in _PART.findall(text))
    else:
        raise InvalidInput(f"invalid duration {value!r} of type {type(value).__name__}")
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise InvalidInput(f"a duration must be finite and not negative, got {value!r}")
    return timedelta(seconds=seconds)


def to_seconds(value: Duration) -> float:
    return parse_duration(value).total_seconds()
