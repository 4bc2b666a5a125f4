"""The codec protocol: what a class named by ``DURABLE["CODEC"]`` provides, and the envelope it writes.

A codec turns one JSON value into an *envelope*, a JSON object that names the
codec (``"$codec"``) and the key it was encoded with (``"kid"``), and back. The
envelope is what the database column holds, so the column stays valid JSON
and needs no migration; a value without ``"$codec"`` is a plain value written
before the codec was turned on and reads as it is.

Invariants a codec keeps:

- ``decode(encode(value)) == value`` for every JSON value;
- ``encode`` names ``key_id`` in the envelope's ``"kid"`` (so ``durable_rekey``
  knows which rows another key wrote) and every key it can still decode with
  stays listed in its configuration;
- ``decode`` raises (any exception) for an envelope it cannot trust: tampered,
  unknown key, another codec. The caller turns that into ``codec_error``.
- An envelope uses none of the keys ``code``, ``type`` and ``retryable``: error
  records keep those beside it in clear (:data:`CLEAR_ERROR_KEYS`).

Codecs are built once per settings value and shared by every thread: their
methods must be thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

#: The key that marks a stored JSON object as an envelope.
ENVELOPE = "$codec"
#: The key of an envelope naming the key id it was encoded with.
KEY_ID = "kid"
#: Keys of an error record stored in clear beside its envelope (filters and lists read them).
CLEAR_ERROR_KEYS = ("code", "type", "retryable")


@runtime_checkable
class Codec(Protocol):
    """Encodes JSON values into envelopes and decodes them back (see the module docstring).

    The class named by ``DURABLE["CODEC"]`` is called as ``cls(keys=...)`` with
    ``DURABLE["CODEC_KEYS"]``; it raises ``ValueError`` (or ImproperlyConfigured)
    with a clear message when they do not suit it.
    """

    #: The codec's name, written in every envelope's ``"$codec"``.
    name: str
    #: The id of the key new envelopes are encoded with.
    key_id: str

    def encode(self, value: Any) -> dict[str, Any]:
        """The envelope of the JSON ``value``: ``{"$codec": name, "kid": key_id, ...}``."""
        ...

    def decode(self, envelope: Mapping[str, Any]) -> Any:
        """The JSON value of ``envelope``; raises when it cannot be trusted (tampered, unknown key)."""
        ...


def is_envelope(value: Any) -> bool:
    """True when a stored JSON value is an envelope rather than a plain (pre-codec) value."""
    return isinstance(value, dict) and ENVELOPE in value
