"""JSON payloads and error records.

Every value the engine stores (inputs, outputs, errors, signal payloads) is
plain JSON. Values are normalised on the way in (tuples become lists, keys must
be strings) so a value seen on the first execution is identical to the value
replayed from the database later.
"""

from __future__ import annotations

import json
import re
import traceback
from typing import Any

from durable.exceptions import CodecError, FatalError, InvalidInput

# An escaped NUL not preceded by an escaped backslash; a surrogate code point left alone.
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def to_json(value: Any, what: str = "value", *, max_bytes: int | None = None) -> Any:
    """Return ``value`` as it will read back from the database, or raise InvalidInput."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} must be JSON-serialisable: {exc}") from None
    # PostgreSQL's jsonb cannot hold NUL, nor any database an unpaired surrogate.
    if "\\u0000" in text and _NUL.search(text):
        raise InvalidInput(f"{what} contains a NUL character (\\u0000), which cannot be stored")
    if "\\ud" in text and _LONE_SURROGATE.search(json.dumps(value, allow_nan=False, ensure_ascii=False)):
        raise InvalidInput(f"{what} contains an unpaired surrogate, which cannot be stored")
    if max_bytes is not None and len(text.encode()) > max_bytes:
        raise InvalidInput(f"{what} is {len(text.encode())} bytes of JSON; the limit is {max_bytes}")
    # Fast path: scalars need no round trip.
    if value is None or isinstance(value, (str, bool, int)):
        return value
    return json.loads(text)


class Undecodable:
    """Stands for a stored payload that did not decode (tampered, unknown key): reads never raise.

    The store returns it in place of the value; a turn that meets one fails its
    run with code ``codec_error`` (:func:`decoded`), the admin and the API show
    the reason. It is not JSON: writing it back is a bug, and fails loudly.
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<undecodable payload: {self.reason}>"


def or_reason(value: Any) -> Any:
    """``value``, or for an :class:`Undecodable` one the JSON ``{"undecodable": true, "reason": ...}``."""
    return {"undecodable": True, "reason": value.reason} if isinstance(value, Undecodable) else value


def decoded(value: Any, what: str) -> Any:
    """``value``, or raise :class:`~durable.exceptions.CodecError` when it is :class:`Undecodable`."""
    if isinstance(value, Undecodable):
        raise CodecError(f"{what} could not be decoded: {value.reason}")
    return value


def error_record(exc: BaseException, *, code: str | None = None, retryable: bool | None = None) -> dict[str, Any]:
    """Describe ``exc`` as the JSON error record stored on runs and checkpoints.

    Keys: ``message``, ``code``, ``retryable``, ``type``, ``traceback``.
    """
    if retryable is None:
        retryable = not isinstance(exc, FatalError)
    if code is None:
        code = getattr(exc, "code", None) if isinstance(getattr(exc, "code", None), str) else None
    return {
        "message": str(exc),
        "code": code,
        "retryable": retryable,
        "type": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:],
    }
