"""Records from rows read by raw SQL on PostgreSQL (JSON arrives as text)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field

from durable.engine.ports import CheckpointRecord, RunRecord
from durable.store.statements import CP_LOAD, RUN_COLUMNS

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


def to_checkpoint(seq: int, values: Sequence[Any]) -> CheckpointRecord:
    """A CheckpointRecord from its seq and a row of ``CP_LOAD`` columns."""
    return CheckpointRecord(seq=seq, **from_db(CP_LOAD, values))
