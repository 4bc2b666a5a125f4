"""Model fields of payload columns: JSON columns whose values pass through the configured codec.

The column is the same JSON column as before (``deconstruct`` names
``JSONField``, so migrations and the schema do not change): only the value
written and read is an envelope when ``DURABLE["CODEC"]`` is set. Saves,
updates and bulk inserts through the ORM seal the value
(``get_db_prep_save``); the PostgreSQL store's statements call :func:`stored`
for the same. Lookups are not sealed: a payload column is not searchable when
encrypted (the clear keys of an error record are).
"""

from __future__ import annotations

from typing import Any

from django.db import models

from durable import runtime
from durable.codecs.payloads import open_value, seal
from durable.codecs.protocol import is_envelope


def current_codec() -> Any:
    """The codec of the current settings (None: payloads in clear)."""
    return runtime.settings().codec


class PayloadField(models.JSONField):
    """A JSON column holding a user payload, encoded by the codec; ``error=True``: an error record."""

    def __init__(self, *args: Any, error: bool = False, **kwargs: Any) -> None:
        self.error = error
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        # The column is a JSON column like any other: no migration follows the codec.
        return name, "django.db.models.JSONField", args, kwargs

    def seal(self, value: Any) -> Any:
        """``value`` as it is written to the column (an envelope when a codec is on)."""
        return seal(current_codec(), value, error=self.error)

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        if value is not None and not hasattr(value, "resolve_expression"):
            value = self.seal(value)
        return super().get_db_prep_save(value, connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        value = super().from_db_value(value, expression, connection)
        # Read for every payload of every history row: the settings are consulted only for an envelope.
        return open_value(current_codec(), value) if is_envelope(value) else value
