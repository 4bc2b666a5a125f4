"""The built-in codec: AES-256-GCM with keys from ``DURABLE["CODEC_KEYS"]`` (the ``encryption`` extra).

Envelope: ``{"$codec": "aesgcm", "kid": <key id>, "ct": <urlsafe base64 of nonce + ciphertext>}``.
Each encode draws a fresh 96-bit random nonce; the key id is the associated data,
so an envelope whose ``kid`` was edited does not decrypt. ``cryptography`` is
imported when the codec is built, never by ``import durable``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from durable.codecs.protocol import ENVELOPE, KEY_ID

_KEY_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_NONCE = 12
#: How to make a key for ``CODEC_KEYS`` (printed by the system check).
KEYGEN = 'python -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'


def _key_bytes(kid: Any, key: Any) -> bytes:
    if not isinstance(kid, str) or not _KEY_ID.match(kid):
        raise ValueError(f"key id {kid!r} must be 1-64 characters of letters, digits, '_', '-', '.', ':'")
    if not isinstance(key, str):
        raise ValueError(f"key {kid!r} must be a urlsafe-base64 string, got {type(key).__name__}")
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise ValueError(f"key {kid!r} is not urlsafe base64; generate one with: {KEYGEN}") from None
    if len(raw) != 32:
        raise ValueError(f"key {kid!r} decodes to {len(raw)} bytes; AES-256-GCM needs 32 (generate one with: {KEYGEN})")
    return raw


class AESGCMCodec:
    """AES-256-GCM; the first key of ``keys`` encrypts, every key listed decrypts.

    Thread-safe: the AESGCM objects are immutable and the nonce comes from ``os.urandom``.
    """

    name = "aesgcm"

    def __init__(self, keys: Mapping[str, str]) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ValueError(f"CODEC_KEYS must be a non-empty dict of key id to key; generate a key with: {KEYGEN}")
        raw = {kid: _key_bytes(kid, key) for kid, key in keys.items()}
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise ImproperlyConfigured(
                "durable.codecs.AESGCMCodec needs the cryptography package: pip install 'django-durable[encryption]'"
            ) from None
        self._ciphers = {kid: AESGCM(key) for kid, key in raw.items()}
        self.key_id: str = next(iter(raw))
        self._cipher = self._ciphers[self.key_id]
        self._aad = self.key_id.encode()

    def encode(self, value: Any) -> dict[str, Any]:
        """Encrypt the JSON text of ``value`` with the first key."""
        nonce = os.urandom(_NONCE)
        text = json.dumps(value, separators=(",", ":")).encode()
        sealed = nonce + self._cipher.encrypt(nonce, text, self._aad)
        return {ENVELOPE: self.name, KEY_ID: self.key_id, "ct": base64.urlsafe_b64encode(sealed).decode("ascii")}

    def decode(self, envelope: Mapping[str, Any]) -> Any:
        """Decrypt ``envelope``; ValueError naming why (other codec, unknown key, tampered)."""
        if envelope.get(ENVELOPE) != self.name:
            raise ValueError(f"written by codec {envelope.get(ENVELOPE)!r}, not {self.name!r}")
        kid = envelope.get(KEY_ID)
        cipher = self._ciphers.get(kid) if isinstance(kid, str) else None
        if cipher is None or not isinstance(kid, str):
            raise ValueError(f"encrypted with key {kid!r}, which is not in CODEC_KEYS")
        try:
            sealed = base64.urlsafe_b64decode(str(envelope.get("ct", "")).encode("ascii"))
            text = cipher.decrypt(sealed[:_NONCE], sealed[_NONCE:], kid.encode())
        except Exception:  # noqa: BLE001 - InvalidTag, bad base64, short input: all mean untrustworthy
            raise ValueError(f"does not decrypt with key {kid!r} (tampered or corrupted)") from None
        return json.loads(text)
