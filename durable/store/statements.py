"""Every SQL statement of the stores, by name, in one place.

The texts are built once from the models' columns. Those under "any Django
database" run on the portable store's backends too (standard SQL, quoted
identifiers); the rest are PostgreSQL's single-statement forms of the hot
path: data-modifying CTEs, arrays per column, ``FOR UPDATE SKIP LOCKED``.
Statements whose text depends on a plan (a commit writes as many
checkpoints as its turn made) are built by
:class:`durable.store.typed_statements.PostgresStatements`, which also casts
parameters for the connection it serves.

Concurrency rules every statement here keeps: the run row is locked before
its checkpoints; a lease holder's write is conditional on ``status`` and
``locked_by`` in the same statement; where a statement must see the latest
committed state of a row it waits for, it locks that row in a ``FOR
UPDATE`` CTE and filters on that CTE's output, never on the statement's
snapshot (taken before the wait).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Field

from durable.engine.ports import CheckpointRecord
from durable.engine.vocab import SETTLED, Admission, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import BufferedSignal, Checkpoint, Queue, Run, Schedule, SignalWaiter


def q(name: str) -> str:
    """A quoted identifier (standard SQL; PostgreSQL and SQLite both take it)."""
    return '"' + name.replace('"', '""') + '"'


def _in(values: Sequence[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _unindexed(column: str, alias: str = "") -> str:
    """``column`` in a form no index serves (its value unchanged: the columns it wraps are never '').

    A statement that finds its row by primary key writes its other conditions
    so: a generic plan made from stale statistics could otherwise take the
    index that leads with the status and walk every run of that status.
    """
    return f"COALESCE({alias + '.' if alias else ''}{q(column)}, '')"


RUN_TABLE = q(Run._meta.db_table)
CP_TABLE = q(Checkpoint._meta.db_table)
WAITER_TABLE = q(SignalWaiter._meta.db_table)
SIGNAL_TABLE = q(BufferedSignal._meta.db_table)
QUEUE_TABLE = q(Queue._meta.db_table)
SIGNAL_ID: Field[Any, Any] = BufferedSignal._meta.pk
RUN_COLUMNS: list[Field[Any, Any]] = list(Run._meta.concrete_fields)
RUN_FIELD = {f.name: f for f in RUN_COLUMNS}
CP_FIELD: dict[str, Field[Any, Any]] = {f.name: f for f in Checkpoint._meta.concrete_fields}
CP_INSERT: list[Field[Any, Any]] = [f for f in Checkpoint._meta.concrete_fields if not f.primary_key]
_CP_RECORD = set(CheckpointRecord.__dataclass_fields__)


def col(field: Field[Any, Any]) -> str:
    return q(str(field.column))


def run_columns(alias: str | None = None) -> str:
    return ", ".join(f"{alias}.{col(f)}" if alias else col(f) for f in RUN_COLUMNS)


# -- any Django database ------------------------------------------------------------
# Idempotent start: the primary key decides between concurrent callers.
INSERT_RUN = (
    f"INSERT INTO {RUN_TABLE} ({run_columns()}) VALUES ({', '.join(['%s'] * len(RUN_COLUMNS))}) "
    f"ON CONFLICT ({q('id')}) DO NOTHING RETURNING {q('id')}"
)
# The lease of a pending run, or of a suspended run whose wake is due.
# Params: running, owner, lease_until, now, now, run_id, pending, suspended, now.
ACQUIRE = (
    f"UPDATE {RUN_TABLE} SET {q('status')} = %s, {q('locked_by')} = %s, {q('locked_until')} = %s, "
    f"{q('updated_at')} = %s, {q('started_at')} = COALESCE({q('started_at')}, %s), "
    f"{q('turns')} = {q('turns')} + 1 WHERE {q('id')} = %s AND ({q('status')} = %s "
    f"OR ({q('status')} = %s AND {q('wake_at')} <= %s)) RETURNING {run_columns()}"
)

# Runs whose JSON ``tags`` array holds %s, where JSON containment has no lookup (SQLite). A WHERE fragment.
HAS_TAG = f"EXISTS (SELECT 1 FROM json_each({RUN_TABLE}.{q('tags')}) WHERE value = %s)"


# -- PostgreSQL ---------------------------------------------------------------------
# Params: owner, lease_until, now, now, run_id, now.
PG_ACQUIRE = (
    f"UPDATE {RUN_TABLE} SET {q('status')} = '{RunStatus.RUNNING}', {q('locked_by')} = %s, "
    f"{q('locked_until')} = %s, {q('updated_at')} = %s, {q('started_at')} = COALESCE({q('started_at')}, %s), "
    f"{q('turns')} = {q('turns')} + 1 WHERE {q('id')} = %s AND ({_unindexed('status')} = '{RunStatus.PENDING}' "
    f"OR ({_unindexed('status')} = '{RunStatus.SUSPENDED}' AND {q('wake_at')} <= %s)) "
    f"RETURNING {run_columns(RUN_TABLE)}"
)
# Params: run_id, status, owner.
_LEASED = f"{q('id')} = %s AND {_unindexed('status')} = %s AND {_unindexed('locked_by')} = %s"
PG_LEASE_HELD = f"SELECT 1 FROM {RUN_TABLE} WHERE {_LEASED}"
# A suspension written by one statement, woken if a checkpoint it waits on settled meanwhile.
# Params: now, run_id, suspended, run_id, seqs.
PG_POKE_IF_SETTLED = (
    f"UPDATE {RUN_TABLE} SET {q('wake_at')} = %s WHERE {q('id')} = %s AND {_unindexed('status')} = %s "
    f"AND EXISTS (SELECT 1 FROM {CP_TABLE} WHERE {q('run_id')} = %s AND {q('seq')} = ANY(%s) "
    f"AND {q('status')} IN ({_in(SETTLED)})) RETURNING 1"
)
# Statuses a statement expects, as one text parameter joined by commas (statuses hold none): the
# driver dumps a list by inspecting its elements for their type at every call, a string at once.
STATUSES = "string_to_array(%s::text, ',')"


def spread(cast: str) -> str:
    """The text of an array column whose parameters are :func:`column_params`'s (``cast``: ``%s::type``).

    Either the array itself, or ``array_fill`` of its one value: the same
    rows either way, in one text, so the statement stays one prepared shape.
    """
    return f"COALESCE({cast}[], array_fill({cast}, ARRAY[%s::integer]))"


def column_params(values: list[Any]) -> list[Any]:
    """The three parameters of a :func:`spread` column: the values, or the one value they all are and its count.

    Most columns of a page's shared commit hold one value on every row (the
    same status, instant, owner or NULL); the driver adapts an array element
    by element in Python, so one value and a count cost a fraction of it.
    """
    if values and values.count(values[0]) == len(values):
        return [None, values[0], len(values)]
    return [values, None, 0]


def statuses(values: Iterable[str]) -> str:
    """The parameter of :data:`STATUSES` for ``values``."""
    return ",".join(values)


# Claim a pending, due step of an active run, locking the checkpoint row only. Found by its
# (run_id, seq) alone: its status unindexed, for the partial indexes of open steps lead with it.
# Params: owner, lease_until, now, run_id, seq, now, run statuses (statuses()), now, now.
PG_CLAIM_STEP = (
    f"UPDATE {CP_TABLE} c SET {q('status')} = '{CheckpointStatus.RUNNING}', "
    f"{q('attempts')} = c.{q('attempts')} + 1, {q('locked_by')} = %s, {q('wake_at')} = %s, "
    f"{q('dispatches')} = 0, {q('started_at')} = %s, {q('timeout_at')} = NULL FROM {RUN_TABLE} r "
    f"WHERE c.{q('run_id')} = %s AND c.{q('seq')} = %s AND c.{q('kind')} = '{CheckpointKind.STEP}' "
    f"AND {_unindexed('status', 'c')} = '{CheckpointStatus.PENDING}' "
    f"AND (c.{q('retry_at')} IS NULL OR c.{q('retry_at')} <= %s) AND r.{q('id')} = c.{q('run_id')} "
    f"AND r.{q('status')} = ANY({STATUSES}) "
    # A limited queue's step only while admitted, its start reached, its admission's lease running.
    f"AND (c.{q('admission')} IS NULL OR (c.{q('admission')} = '{Admission.ADMITTED}' "
    f"AND c.{q('admitted_at')} <= %s AND c.{q('wake_at')} > %s)) "
    f"RETURNING c.{q('id')}, c.{q('name')}, c.{q('input')}, c.{q('attempts')}, r.{q('namespace')}, "
    f"c.{q('queue')}, COALESCE(c.{q('retry_at')}, c.{q('enqueued_at')}), r.{q('workflow')}, r.{q('trace_context')}"
)
# Params: timeout_at, checkpoint id.
PG_SET_STEP_TIMEOUT = f"UPDATE {CP_TABLE} SET {q('timeout_at')} = %s WHERE {q('id')} = %s"
# The JSON values of a history row, in the order they are packed.
RAW_JSON = ("input", "output", "error")


def _raw_history_columns(alias: str = "") -> str:
    """A history row for :func:`durable.store.postgres.rows.to_checkpoint`: CheckpointRecord's fields in order,
    its three JSON values as one JSON array (one decode per row)."""
    at = f"{alias}." if alias else ""
    names = list(CheckpointRecord.__dataclass_fields__)
    first = names.index("input")
    if names[first : first + 3] != list(RAW_JSON):
        raise RuntimeError("CheckpointRecord's input, output and error must follow each other")
    parts = [f"{at}{col(CP_FIELD[name])}" for name in names]
    packed = f"json_build_array({', '.join(parts[first : first + 3])})::text"
    return ", ".join([*parts[:first], packed, *parts[first + 3 :]])


# Params: run_id.
PG_LOAD_CHECKPOINTS = f"SELECT {_raw_history_columns()} FROM {CP_TABLE} WHERE {q('run_id')} = %s ORDER BY {q('seq')}"
# Params: run ids.
PG_LOAD_HISTORIES = (
    f"SELECT {q('run_id')}, {_raw_history_columns()} FROM {CP_TABLE} "
    f"WHERE {q('run_id')} = ANY(%s) ORDER BY {q('run_id')}, {q('seq')}"
)
# The run's count of checkpoints, then its checkpoints at the positions given or past one: always
# one row at least (the count; its checkpoint columns null when none matched). Params: run_id,
# run_id, seqs, after.
PG_LOAD_DELTA = (
    f"SELECT t.total, {_raw_history_columns('c')} FROM (SELECT count(*) AS total FROM {CP_TABLE} "
    f"WHERE {q('run_id')} = %s) t LEFT JOIN {CP_TABLE} c ON c.{q('run_id')} = %s "
    f"AND (c.{q('seq')} = ANY(%s::integer[]) OR c.{q('seq')} > %s) ORDER BY c.{q('seq')}"
)
# Wake the suspended runs waiting on any of the tokens. Params: now, tokens.
# Driven from the waiters (their index on name): the runs are found by primary key, and the
# status is checked in a form no index serves. As ``status = 'suspended' AND id IN (...)`` a
# generic plan (a prepared statement's, made from statistics that may predate the rows) may
# walk every suspended run through the status index and probe the waiters for each.
PG_WAKE_WAITERS = (
    f"UPDATE {RUN_TABLE} SET {q('wake_at')} = %s WHERE {q('id')} = ANY(ARRAY("
    f"SELECT {q('run_id')} FROM {WAITER_TABLE} WHERE {q('name')} = ANY(%s))) "
    f"AND {_unindexed('status')} = '{RunStatus.SUSPENDED}' RETURNING {q('id')}"
)
# The channel of work notifications (DURABLE["NOTIFY"]): the payload is the run's namespace, so a
# scoped worker can ignore the others; pg_notify in a statement is delivered when it commits.
NOTIFY_CHANNEL = "durable_work"
# The start insert, announcing the run inserted (no row, no notification, when the id exists).
PG_INSERT_RUN_NOTIFY = INSERT_RUN.replace(
    f"RETURNING {q('id')}", f"RETURNING {q('id')}, pg_notify('{NOTIFY_CHANNEL}', {q('namespace')})"
)
# Announce runs (woken in the current transaction). Params: run ids.
PG_NOTIFY_RUNS = f"SELECT pg_notify('{NOTIFY_CHANNEL}', {q('namespace')}) FROM {RUN_TABLE} WHERE {q('id')} = ANY(%s)"
# Serialises publishers and waiters of one event name, until the transaction ends. Params: key.
PG_EVENT_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"
EVENT_LOCK_PREFIX = "durable-event:"


SCHEDULE_TABLE = q(Schedule._meta.db_table)
SCHEDULE_FIELD = {f.name: f for f in Schedule._meta.concrete_fields}
