"""Who sees payloads in the admin and the REST API, and what the others see instead.

Payloads (inputs, outputs, errors, step arguments and results, signal
payloads, progress, entity state and ops) are shown only to users with the
``durable.view_payloads`` permission. Everyone else who may see the run sees
that a payload exists and its size: ``{"hidden": true, "bytes": N}`` (for an
error record also its code, type and retryable, which the database keeps in
clear too). A payload that did not decode shows as
``{"undecodable": true, "reason": ...}`` (the reason only to those allowed).
Nothing here writes: the values are replaced on the objects and dicts about
to be shown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from durable.codecs.protocol import CLEAR_ERROR_KEYS
from durable.engine.serialization import Undecodable

PAYLOAD_PERMISSION = "durable.view_payloads"
#: The payload attributes of each kind of row shown.
RUN_PAYLOADS = ("input", "output", "error")
CHECKPOINT_PAYLOADS = ("input", "output", "error", "progress", "events")


def can_view_payloads(user: Any) -> bool:
    """Whether ``user`` may see decrypted payloads (``durable.view_payloads``)."""
    return bool(user and user.is_active and user.has_perm(PAYLOAD_PERMISSION))


def size(value: Any) -> int:
    """Bytes of the value's compact JSON (what the database stores in clear, before any codec)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode())


def shown(value: Any, visible: bool, *, error: bool = False) -> Any:
    """What a viewer sees of a stored payload; ``visible``: the viewer has the permission."""
    if isinstance(value, Undecodable):
        return {"undecodable": True, "reason": value.reason} if visible else {"undecodable": True}
    if visible or value is None:
        return value
    summary: dict[str, Any] = {"hidden": True, "bytes": size(value)}
    if error and isinstance(value, dict):
        summary.update({key: value[key] for key in CLEAR_ERROR_KEYS if key in value})
    return summary


def redact(rows: Iterable[Any], fields: Iterable[str], visible: bool) -> None:
    """Replace each of ``fields`` on ``rows`` (model instances about to be shown) by what the viewer sees."""
    names = tuple(fields)
    for row in rows:
        for name in names:
            setattr(row, name, shown(getattr(row, name), visible, error=name == "error"))
