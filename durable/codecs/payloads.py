"""Sealing payload column values with the configured codec, and opening them again.

One value is encoded once per write (:func:`seal`) and decoded once per read
(:func:`open_value`); both are called by the payload fields
(:mod:`durable.codecs.fields`), so every store that writes through the model
fields (the ORM, and the PostgreSQL store's statements) gets them.

What stays in clear, whatever the codec: SQL NULL, empty lists and objects
(nothing to hide, and most rows have them), and in error records the keys of
:data:`~durable.codecs.protocol.CLEAR_ERROR_KEYS`.

Reading never raises: a stored envelope that does not decode (tampered,
unknown key, no codec configured) reads as an
:class:`~durable.engine.serialization.Undecodable`, which the engine turns into
a failed run with code ``codec_error`` and the admin and API show as such.
"""

from __future__ import annotations

from typing import Any

from durable.codecs.protocol import CLEAR_ERROR_KEYS, ENVELOPE, KEY_ID, Codec, is_envelope
from durable.engine.serialization import Undecodable


def seal(codec: Codec | None, value: Any, *, error: bool = False) -> Any:
    """``value`` as stored: an envelope when a codec is on (for an error record, with its clear keys beside)."""
    if codec is None or value is None or value == [] or value == {} or is_envelope(value):
        return value
    if error and isinstance(value, dict):
        clear = {key: value[key] for key in CLEAR_ERROR_KEYS if key in value}
        rest = {key: item for key, item in value.items() if key not in clear}
        return {**codec.encode(rest), **clear}
    return codec.encode(value)


def open_value(codec: Codec | None, stored: Any) -> Any:
    """The value a stored one stands for: plain values as they are, envelopes decoded."""
    if not is_envelope(stored):
        return stored
    if codec is None:
        return Undecodable(
            f"encoded by codec {stored.get(ENVELOPE)!r} (key {stored.get(KEY_ID)!r}), but DURABLE['CODEC'] is not set"
        )
    clear = {key: stored.pop(key) for key in CLEAR_ERROR_KEYS if key in stored}
    try:
        value = codec.decode(stored)
    except Exception as exc:  # noqa: BLE001 - whatever a codec raises, the payload is not trusted
        return Undecodable(f"payload does not decode: {exc}")
    if clear:
        return {**value, **clear} if isinstance(value, dict) else Undecodable("error record envelope is not an object")
    return value


def needs_rekey(codec: Codec, stored: Any) -> bool:
    """True when ``stored`` is in clear or under another key than the codec's current one."""
    if stored is None or stored == [] or stored == {}:
        return False
    if not is_envelope(stored):
        return True
    return bool(stored.get(ENVELOPE) != codec.name or stored.get(KEY_ID) != codec.key_id)
