"""A step's claim as PostgreSQL returns it: from a claim's statement, or from a grant that claimed it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from durable.engine.ports import StepClaim
from durable.store.statements import CP_FIELD, RUN_FIELD


def claim_from_row(run_id: str, seq: int, row: Sequence[Any]) -> StepClaim:
    """The claim of step ``seq`` of ``run_id`` from its returned columns, from the name on.

    In :data:`~durable.store.statements.PG_CLAIM_STEP`'s order: name, input,
    attempts, namespace, queue, ready_at, workflow, trace context (the JSON
    columns as stored, decoded by their model fields).
    """
    name, raw_input, attempts, namespace, queue, ready_at, workflow, raw_trace = row[:8]
    field: Any = CP_FIELD["input"]
    value = field.from_db_value(raw_input, None, connection) if raw_input is not None else None
    trace_field: Any = RUN_FIELD["trace_context"]
    trace = trace_field.from_db_value(raw_trace, None, connection) if raw_trace is not None else None
    return StepClaim(run_id, seq, name, value, attempts, namespace, queue, ready_at, workflow, trace)
