"""``DURABLE["CODEC"]`` and ``DURABLE["CODEC_KEYS"]`` parsed into the codec the settings carry."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from durable.codecs.protocol import Codec


def build(values: dict[str, Any], found: list[str]) -> None:
    """Replace ``values["CODEC"]`` by the codec built from it and ``CODEC_KEYS`` (None when off or bad).

    Every problem is appended to ``found`` as one clear sentence (the system
    check ``durable.E001`` reports them).
    """
    path, keys = values["CODEC"], values["CODEC_KEYS"]
    values["CODEC"] = None
    if not isinstance(keys, dict):
        found.append(f"settings.DURABLE['CODEC_KEYS'] must be a dict of key id to urlsafe-base64 key, got {keys!r}")
        return
    if path is None:
        return
    if not isinstance(path, str) or "." not in path:
        found.append(
            "settings.DURABLE['CODEC'] must be the dotted path of a codec class "
            f"('durable.codecs.AESGCMCodec') or None, got {path!r}"
        )
        return
    try:
        cls = import_string(path)
    except ImportError as exc:
        found.append(f"settings.DURABLE['CODEC'] {path!r} cannot be imported: {exc}")
        return
    try:
        codec = cls(keys=keys)
    except (ValueError, TypeError, ImproperlyConfigured) as exc:
        found.append(f"settings.DURABLE['CODEC'] {path!r}: {exc}")
        return
    if not isinstance(codec, Codec) or not isinstance(codec.name, str) or not isinstance(codec.key_id, str):
        found.append(
            f"settings.DURABLE['CODEC'] {path!r} is not a codec: it needs name and key_id strings "
            "and encode/decode methods (see durable.codecs.Codec)"
        )
        return
    values["CODEC"] = codec
