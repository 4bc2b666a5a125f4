"""Records from rows read by raw SQL on PostgreSQL (JSON arrives as text)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field

from durable.codecs.fields import current_codec
from durable.codecs.payloads import open_value
from durable.codecs.protocol import ENVELOPE
from durable.engine.ports import CheckpointRecord, RunRecord
from durable.store.statements import RUN_COLUMNS

_RECORD_FIELDS = list(RunRecord.__dataclass_fields__)


def from_db(fields: Sequence[Field[Any, Any]], values: Sequence[Any]) -> dict[str, Any]:
    """Column values as the model fields give them, by attribute name."""
    data = {}
    for field, value in zip(fields, values, strict=True):
        if value is not None and hasattr(field, "from_db_value"):
            value = field.from_db_value(value, None, connection)
        data[field.attname] = value
    return data


def to_run(values: Sequence[Any]) -> RunRecord:
    """A RunRecord from a row of :func:`durable.store.statements.run_columns`."""
    data = from_db(RUN_COLUMNS, values)
    return RunRecord(**{name: data[name] for name in _RECORD_FIELDS})


def to_checkpoint(row: Sequence[Any]) -> CheckpointRecord:
    """A CheckpointRecord from a history row (:data:`durable.store.statements.PG_LOAD_CHECKPOINTS`).

    The one place a history row becomes a record: its JSON values arrive as
    one array (``input``, ``output``, ``error``), decoded once; its
    timestamps were parsed by the driver (:meth:`Cursors.history`).
    """
    seq, name, kind, status, packed, *rest = row
    # Payload columns (durable.codecs): each value opened as PayloadField.from_db_value would.
    values = json.loads(packed)
    # The row's JSON text names the codec's key only if a value may be an envelope.
    if ENVELOPE in packed:
        codec = current_codec()
        values = [open_value(codec, value) for value in values]
    return CheckpointRecord(seq, name, kind, status, *values, *rest)
