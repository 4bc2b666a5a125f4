"""A JSON parser with bounds: body size, nesting depth, strict numbers, storable strings.

DRF's own parser reads the request stream without Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` check and lets a deeply nested document reach
the recursion limit, and PostgreSQL refuses ``\\u0000`` in ``jsonb``; each
would be a 5xx or worse. Here an oversized body is a 413, and anything
unparsable or unstorable a 400.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 64


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "payload_too_large"


def max_body_bytes() -> int:
    """Largest accepted body: twice the engine's payload limit plus room for the envelope."""
    payload = int((getattr(settings, "DURABLE", None) or {}).get("MAX_PAYLOAD_BYTES", 1024 * 1024))
    return 2 * payload + 64 * 1024


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise ParseError("JSON strings may not contain the NUL character (\\u0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ParseError("JSON strings may not contain unpaired surrogates") from None


def check_document(value: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse what no database column can store: deep nesting, NUL characters, lone surrogates."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise ParseError(f"JSON nested deeper than {limit} levels")
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(JSONParser):
    """``application/json`` bodies, bounded in size and depth; NaN/Infinity refused."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = max_body_bytes()
        request = (parser_context or {}).get("request")
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0) if request is not None else 0
        except ValueError:
            declared = 0
        if declared > limit:
            raise PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = raw.decode(encoding)
            data = json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        except (ValueError, UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        check_document(data)
        return data
