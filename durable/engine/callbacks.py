"""Callback tokens: which run and position a third party's completion is for, signed so it cannot be guessed.

A token is ``<body>.<signature>``: ``body`` is the run id and the position of
the ``ctx.wait_for_callback`` that made it (URL-safe base64 of JSON), and the
signature is HMAC-SHA256 of ``body`` under the callback key, truncated to 128
bits. The same run and position always give the same token (replay makes it
again without storing it), and nobody without the key can make one. Nothing
here imports Django; the key comes from the engine's settings.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from durable.exceptions import ConfigurationError, InvalidCallbackToken

_SIGNATURE_BYTES = 16


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, body: str) -> str:
    if not key:
        raise ConfigurationError("callback tokens need a key: set SECRET_KEY or DURABLE['CALLBACK_SECRET']")
    return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest()[:_SIGNATURE_BYTES])


def make_token(key: bytes, run_id: str, seq: int) -> str:
    """The token of the callback at position ``seq`` of ``run_id`` (deterministic for a key)."""
    body = _b64(json.dumps([run_id, seq], separators=(",", ":")).encode())
    return f"{body}.{_sign(key, body)}"


def read_token(key: bytes, token: object) -> tuple[str, int]:
    """The run id and position a token names; :class:`~durable.InvalidCallbackToken` unless its signature holds.

    The signature is compared in constant time, before the body is decoded.
    """
    if not isinstance(token, str) or token.count(".") != 1 or len(token) > 1024:
        raise InvalidCallbackToken("not a callback token")
    body, signature = token.split(".")
    if not hmac.compare_digest(_sign(key, body), signature):
        raise InvalidCallbackToken("the callback token's signature is wrong")
    try:
        run_id, seq = json.loads(_unb64(body))
    except (ValueError, TypeError, binascii.Error) as exc:  # signed by us, so only after a key change
        raise InvalidCallbackToken("not a callback token") from exc
    if not isinstance(run_id, str) or isinstance(seq, bool) or not isinstance(seq, int):
        raise InvalidCallbackToken("not a callback token")
    return run_id, seq
