"""The memory store's tables: plain dicts of rows, and an undo journal for atomic blocks.

Rows are dicts with the columns of the database tables (see :mod:`durable.models`).
Every change goes through :meth:`Tables.put`, :meth:`Tables.drop` or
:meth:`Tables.set`, which journal the value they replace, so an atomic block
that fails is undone exactly (:meth:`Tables.rollback`), savepoint by savepoint.
JSON columns hold private copies (made by :func:`as_json` on the way in and out),
so no caller ever shares a mutable value with the store.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from typing import Any

from durable.engine.ports import CheckpointRecord, RunRecord
from durable.engine.vocab import RunStatus

Row = dict[str, Any]
_MISSING = object()

RUN_JSON = (
    "input",
    "output",
    "error",
    "tags",
    "search_attributes",
    "query_values",
    "patches",
    "lifecycle",
    "trace_context",
)
CHECKPOINT_JSON = ("input", "output", "error", "progress", "events")
_RUN_RECORD = list(RunRecord.__dataclass_fields__)
_CP_RECORD = list(CheckpointRecord.__dataclass_fields__)


class IntegrityError(Exception):
    """A write broke a uniqueness rule of the tables (a checkpoint position, an event id); nothing of it stays."""


def as_json(value: Any) -> Any:
    """A private copy of ``value`` as a JSON column stores it (tuples become lists, keys strings)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.loads(json.dumps(value))


def _defaults(now: datetime) -> Row:
    """A run's columns before the caller's fields (the model's defaults)."""
    return {
        "version": 1,
        "status": RunStatus.PENDING,
        "namespace": "default",
        "input": None,
        "output": None,
        "error": None,
        "wake_at": None,
        "locked_by": None,
        "locked_until": None,
        "recovery_attempts": 0,
        "turns": 0,
        "tags": [],
        "search_attributes": {},
        "priority": 0,
        "parent_id": None,
        "retry_of": None,
        "forked_from": None,
        "forked_at_seq": None,
        "continued_to": None,
        "query_values": {},
        "patches": [],
        "cancel_requested": False,
        "awaited": False,
        "awaiting_steps": None,
        "lifecycle": {},
        "lifecycle_owed": False,
        "deadline_at": None,
        "created_at": now,
        "updated_at": now,
        "started_at": None,
        "finished_at": None,
        "trace_context": None,
        "singleton_key": None,
        "singleton_limit": None,
        "singleton_seq": None,
    }


def new_run(fields: Row, now: datetime) -> Row:
    """The row of a new run: the model's defaults, then ``fields`` (unknown columns are refused)."""
    row = _defaults(now)
    unknown = set(fields) - set(row) - {"id", "workflow"}
    if unknown or "id" not in fields or "workflow" not in fields:
        raise TypeError(f"run fields {sorted(unknown) or ['id', 'workflow']} are not columns of a run")
    row.update(fields)
    for name in RUN_JSON:
        row[name] = as_json(row[name])
    return row


def new_checkpoint(run_id: str, record: CheckpointRecord, row_id: int) -> Row:
    """The row of a new checkpoint from its record (dispatch counters and trail start empty)."""
    row: Row = {name: getattr(record, name) for name in _CP_RECORD}
    row.update(id=row_id, run_id=run_id, dispatches=0, heartbeat_at=None, progress=None, events=[], admitted_at=None)
    for name in CHECKPOINT_JSON:
        row[name] = as_json(row[name])
    return row


def run_record(row: Row) -> RunRecord:
    values = {name: row[name] for name in _RUN_RECORD}
    for name in RUN_JSON:
        values[name] = as_json(values[name])
    return RunRecord(**values)


def checkpoint_record(row: Row) -> CheckpointRecord:
    values = {name: row[name] for name in _CP_RECORD}
    for name in ("input", "output", "error"):
        values[name] = as_json(values[name])
    return CheckpointRecord(**values)


class Tables:
    """Runs, checkpoints (by run, then position), waiters, signals, events, batches and workers.

    Not thread-safe by itself: the store holds its lock around every use.
    Ids come from one counter that a rollback does not rewind (as a database
    sequence), so ids only grow and order rows by insertion.
    """

    def __init__(self) -> None:
        self.runs: dict[str, Row] = {}
        self.checkpoints: dict[str, dict[int, Row]] = {}
        self.waiters: dict[int, Row] = {}
        self.signals: dict[int, Row] = {}
        self.events: dict[int, Row] = {}
        self.batches: dict[int, Row] = {}
        self.workers: dict[str, Row] = {}
        self.schedules: dict[str, Row] = {}
        # Singleton keys by (workflow, key): {"limit": ..., "tail": ...}.
        self.slots: dict[tuple[str, str], Row] = {}
        self.queues: dict[str, Row] = {}
        # Entities by (name, key): {"state", "ops", "created_at", "updated_at"}; their op log rows by
        # (name, key, seq), and the position of each logged op id by (name, key, op_id).
        self.entities: dict[tuple[str, str], Row] = {}
        self.entity_ops: dict[tuple[str, str, int], Row] = {}
        self.entity_op_ids: dict[tuple[str, str, str], int] = {}
        self._ids = itertools.count(1)
        self._undo: list[tuple[dict[Any, Any], Any, Any]] = []

    def next_id(self) -> int:
        return next(self._ids)

    @staticmethod
    def ordered(table: dict[int, Row]) -> list[Row]:
        """The rows of a table keyed by id, oldest first (a rollback may re-insert a row out of order)."""
        return [table[key] for key in sorted(table)]

    def history(self, run_id: str) -> dict[int, Row]:
        """The checkpoints of ``run_id`` by position (an empty dict when it has none)."""
        return self.checkpoints.setdefault(run_id, {})

    # -- journaled changes ----------------------------------------------------------
    def put(self, table: dict[Any, Any], key: Any, row: Any) -> None:
        self._undo.append((table, key, table.get(key, _MISSING)))
        table[key] = row

    def drop(self, table: dict[Any, Any], key: Any) -> None:
        if key in table:
            self._undo.append((table, key, table[key]))
            del table[key]

    def set(self, row: Row, **changes: Any) -> None:
        for name, value in changes.items():
            if name not in row:
                raise TypeError(f"{name!r} is not a column")
            self._undo.append((row, name, row[name]))
            row[name] = value

    def mark(self) -> int:
        """A savepoint: the journal's length now."""
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        """Undo every change made since ``mark``, newest first."""
        while len(self._undo) > mark:
            table, key, old = self._undo.pop()
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old

    def forget(self) -> None:
        """The outermost block committed: nothing can be undone any more."""
        self._undo.clear()
