"""Encryption at rest of payloads: the codec protocol and the built-in AES-GCM codec.

``DURABLE["CODEC"] = "durable.codecs.AESGCMCodec"`` with ``DURABLE["CODEC_KEYS"]``
turns it on (docs: Encryption). Importing this package does not import
``cryptography``: the AES-GCM codec does when it is built.
"""

from __future__ import annotations

from durable.codecs.aesgcm import KEYGEN, AESGCMCodec
from durable.codecs.protocol import CLEAR_ERROR_KEYS, ENVELOPE, KEY_ID, Codec, is_envelope

__all__ = ["CLEAR_ERROR_KEYS", "ENVELOPE", "KEYGEN", "KEY_ID", "AESGCMCodec", "Codec", "is_envelope"]
