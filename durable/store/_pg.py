"""Single-statement forms of the hot-path writes, for PostgreSQL.

A turn's commit, a step's claim and a step's result are each one SQL
statement here (data-modifying CTEs). Outside a transaction that is one
round trip and one commit instead of BEGIN, several statements and COMMIT;
inside one (``ctx.transaction``, a test) it simply joins it. SQLite and the
rarer shapes of each write keep the ORM versions in the store modules.
The due-run sweep's page commits several turns' outcomes in one statement
per shape (:func:`commit_many`). With ``PREPARED_STATEMENTS`` every
statement here is prepared once per connection.

Concurrency: every statement keeps the guarantees of the ORM version it
replaces. The commit's lease compare-and-set is the first CTE and every
other part reads its output, so a lost lease writes nothing. Where a
statement must see the latest committed state of a row it waits for (a
step result arriving while a turn commits), it locks that row in a
``FOR UPDATE`` CTE and filters on that CTE's output, never on the
statement's snapshot, which was taken before the wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Field, JSONField

from durable import conf
from durable.engine.plan import CHECKPOINT_UPDATABLE, CommitPlan
from durable.engine.ports import CheckpointRecord, RunRecord
from durable.models import ACTIVE, Checkpoint, Run, RunStatus, SignalWaiter

_q = connection.ops.quote_name
RUN_TABLE = _q(Run._meta.db_table)
CP_TABLE = _q(Checkpoint._meta.db_table)
_RUN_COLUMNS: list[Field[Any, Any]] = list(Run._meta.concrete_fields)
_CP_INSERT: list[Field[Any, Any]] = [f for f in Checkpoint._meta.concrete_fields if not f.primary_key]
_RUN_FIELD = {f.name: f for f in _RUN_COLUMNS}
_CP_FIELD = {f.name: f for f in Checkpoint._meta.concrete_fields}
_RECORD_FIELDS = list(RunRecord.__dataclass_fields__)
_ACTIVE = [str(s) for s in ACTIVE]


def usable() -> bool:
    return connection.vendor == "postgresql"


_COLS: dict[Field[Any, Any], str] = {}


def _col(field: Field[Any, Any]) -> str:
    col = _COLS.get(field)
    if col is None:
        col = _COLS[field] = _q(str(field.column))
    return col


_CASTS: dict[Field[Any, Any], str] = {}


def _param(field: Field[Any, Any]) -> str:
    # Explicit casts: parameters in a SELECT list (INSERT ... SELECT) have no column to infer from.
    cast = _CASTS.get(field)
    if cast is None:
        cast = _CASTS[field] = f"%s::{field.cast_db_type(connection)}"
    return cast


def _prep(field: Field[Any, Any], value: Any) -> Any:
    # What get_db_prep_save does for these column types on PostgreSQL, without its layers:
    # JSON is adapted with the field's encoder; strings, numbers and aware datetimes pass as is.
    if isinstance(field, JSONField):
        return connection.ops.adapt_json_value(value, field.encoder) if value is not None else None
    return value


def _run_select(alias: str) -> str:
    return ", ".join(f"{alias}.{_col(f)}" for f in _RUN_COLUMNS)


def _from_db(fields: Sequence[Field[Any, Any]], values: Sequence[Any]) -> dict[str, Any]:
    """Column values as the model fields give them (JSON arrives as text), by attribute name."""
    data = {}
    for field, value in zip(fields, values, strict=True):
        if value is not None and hasattr(field, "from_db_value"):
            value = field.from_db_value(value, None, connection)
        data[field.attname] = value
    return data


def to_run(values: Sequence[Any]) -> RunRecord:
    """A RunRecord from a row of ``_run_select`` columns."""
    data = _from_db(_RUN_COLUMNS, values)
    return RunRecord(**{name: data[name] for name in _RECORD_FIELDS})


# Django turns psycopg's automatic preparation off (prepare_threshold None), and psycopg then
# refuses even an explicit prepare=True. A threshold no statement reaches turns explicit
# preparation back on without preparing anything else: Django's own cursors bind on the
# client and never prepare.
_EXPLICIT_ONLY = 1 << 62
_preparing: Any = None


def _preparing_cursor_class() -> Any:
    """A server-side binding cursor class that prepares every statement it runs.

    The statements here are few and fixed (a commit's text varies only with
    the number of checkpoints it writes), so each is parsed and planned once
    per connection; psycopg keeps the most recent ``prepared_max`` of them.
    Imported on first use: the PostgreSQL backend needs psycopg.
    """
    global _preparing
    if _preparing is None:
        from django.db.backends.postgresql import base

        server_binding: Any = base.ServerBindingCursor

        class PreparingCursor(server_binding):  # type: ignore[misc]
            def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                return super().execute(query, params, prepare=True, **kwargs)

        _preparing = PreparingCursor
    return _preparing


def _cursor() -> Any:
    """A cursor for the statements here: Django's, or (``PREPARED_STATEMENTS``) a preparing one.

    Both go through Django's cursor wrapper, so execute_wrapper hooks, query
    logging and error translation see these statements as any other.
    """
    if not conf.get().prepared_statements:
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw: Any = connection.connection
    if raw.prepare_threshold is None:
        raw.prepare_threshold = _EXPLICIT_ONLY
    cursor = _preparing_cursor_class()(raw)
    return connection.make_debug_cursor(cursor) if connection.queries_logged else connection.make_cursor(cursor)


def execute(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with _cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


# -- a turn's commit ----------------------------------------------------------------
_LEASED = f"{_q('id')} = %s AND {_q('status')} = %s AND {_q('locked_by')} = %s"


def _cp_value(run_id: str, rec: CheckpointRecord, field: Field[Any, Any]) -> Any:
    if field.name == "run":
        return run_id
    if field.name in _CP_RECORD:
        return getattr(rec, field.name)
    return field.get_default()


_CP_RECORD = set(CheckpointRecord.__dataclass_fields__)


def _set_clause(fields: Mapping[str, Any], params: list[Any]) -> str:
    parts = []
    for name, value in fields.items():
        field = _RUN_FIELD[name]
        parts.append(f"{_col(field)} = {_param(field)}")
        params.append(_prep(field, value))
    return ", ".join(parts)


def commit(plan: CommitPlan) -> tuple[bool, datetime | None, bool]:
    """Execute a commit plan of shape ``BATCH`` or ``STATEMENT`` as one statement.

    Returns whether anything was written (False: the lease or a step claim
    was gone), the run's ``wake_at`` as written, and whether any run ever
    waited for this one (its latest committed ``awaited``, read under the
    row lock).
    """
    run, lease = plan.run, plan.run.lease
    params: list[Any] = []
    sets = _set_clause(run.sets, params)
    if run.cancel_wake is not None:
        sets += (
            f"{', ' if sets else ''}{_q('wake_at')} = "
            f"CASE WHEN {_q('cancel_requested')} THEN %s::timestamptz ELSE %s::timestamptz END"
        )
        params += [run.cancel_wake.now, run.cancel_wake.wake_at]
    claimed = [u for u in plan.updates if u.claimed_by is not None]
    # Steps this process claimed must still be claimed by it: checked on the locked row
    # (latest version), as part of the lease condition, so a miss writes nothing at all.
    claims = "".join(
        f" AND EXISTS (SELECT 1 FROM {CP_TABLE} WHERE {_q('run_id')} = %s AND {_q('seq')} = %s "
        f"AND {_q('status')} = ANY(%s) AND {_q('locked_by')} = %s FOR UPDATE)"
        for _ in claimed
    )
    if sets:
        cas = f"UPDATE {RUN_TABLE} SET {sets} WHERE {_LEASED}{claims} RETURNING {_q('wake_at')}, {_q('awaited')}"
    else:
        # Nothing to change on the run: a share lock is enough to serialise with a cancel
        # or a takeover (both update the row), and costs no new row version.
        cas = f"SELECT {_q('wake_at')}, {_q('awaited')} FROM {RUN_TABLE} WHERE {_LEASED}{claims} FOR SHARE"
    ctes = [f"lease AS ({cas})"]
    params += [lease.run_id, lease.status, lease.owner]
    for u in claimed:
        params += [lease.run_id, u.seq, list(u.expect), u.claimed_by]
    for i, u in enumerate(plan.updates):
        cols = []
        for name, value in u.written().items():
            field = _CP_FIELD[name]
            cols.append(f"{_col(field)} = {_param(field)}")
            params.append(_prep(field, value))
        ctes.append(
            f"u{i} AS (UPDATE {CP_TABLE} SET {', '.join(cols)} WHERE {_q('run_id')} = %s AND {_q('seq')} = %s "
            f"AND {_q('status')} = ANY(%s) AND EXISTS (SELECT 1 FROM lease))"
        )
        params += [lease.run_id, u.seq, list(u.expect)]
    if plan.inserts:
        row = f"SELECT {', '.join(_param(f) for f in _CP_INSERT)} FROM lease"
        for rec in plan.inserts:
            params += [_prep(f, _cp_value(lease.run_id, rec, f)) for f in _CP_INSERT]
        names = ", ".join(_col(f) for f in _CP_INSERT)
        ctes.append(f"ins AS (INSERT INTO {CP_TABLE} ({names}) {' UNION ALL '.join([row] * len(plan.inserts))})")
    found = execute(f"WITH {', '.join(ctes)} SELECT {_q('wake_at')}, {_q('awaited')} FROM lease", params)
    if not found:
        return False, None, False
    wake: datetime | None = found[0][0]
    return True, wake, bool(found[0][1])


def _array(field: Field[Any, Any]) -> str:
    return f"%s::{field.cast_db_type(connection)}[]"


# A checkpoint update in a batch writes every updatable column; those a single commit
# leaves as stored when unset (plan.KEEP_IF_UNSET) keep their stored value here instead.
_KEEP_IF_UNSET = {"started_at": "COALESCE(u.{c}, cp.{c})", "attempts": "COALESCE(NULLIF(u.{c}, 0), cp.{c})"}


def commit_many(plans: Sequence[CommitPlan]) -> dict[str, tuple[datetime | None, bool]]:
    """:func:`commit` for several plans of one :attr:`CommitPlan.batch_key`, in one statement.

    Values travel as one array per column, so the statement's text depends
    only on the shape and is prepared once. Each run's row is updated only
    where the owner still holds its lease, and only those runs' checkpoints
    are written. Returns ``{run_id: (wake_at, awaited)}`` for the runs written.
    """
    first = plans[0].run
    names = list(first.sets)
    ids = [p.run.lease.run_id for p in plans]
    params: list[Any] = [ids]
    cols = [_q("id")]
    for name in names:
        field = _RUN_FIELD[name]
        cols.append(_col(field))
        params.append([_prep(field, p.run.sets[name]) for p in plans])
    sets = [f"{c} = v.{c}" for c in cols[1:]]
    arrays = ["%s::varchar[]"] + [_array(_RUN_FIELD[n]) for n in names]
    if first.cancel_wake is not None:
        cols += ["cw_now", "cw_wake"]
        arrays += ["%s::timestamptz[]", "%s::timestamptz[]"]
        wakes = [p.run.cancel_wake for p in plans]
        params += [[w.now for w in wakes if w], [w.wake_at for w in wakes if w]]
        sets.append(f"{_q('wake_at')} = CASE WHEN r.{_q('cancel_requested')} THEN v.cw_now ELSE v.cw_wake END")
    ctes = [
        f"v AS (SELECT * FROM unnest({', '.join(arrays)}) AS v({', '.join(cols)}))",
        # The runs are found by primary key only: the lease condition is written so that no
        # index serves it, or a plan made without statistics may scan every running run.
        f"lease AS (UPDATE {RUN_TABLE} r SET {', '.join(sets)} FROM v WHERE r.{_q('id')} = v.{_q('id')} "
        f"AND r.{_q('id')} = ANY(%s::varchar[]) AND COALESCE(r.{_q('status')}, '') = %s "
        f"AND COALESCE(r.{_q('locked_by')}, '') = %s "
        f"RETURNING r.{_q('id')}, r.{_q('wake_at')}, r.{_q('awaited')})",
    ]
    params += [ids, first.lease.status, first.lease.owner]
    creates = [(p.run.lease.run_id, rec) for p in plans for rec in p.inserts]
    if creates:
        names_sql = ", ".join(_col(f) for f in _CP_INSERT)
        ctes.append(
            f"ins AS (INSERT INTO {CP_TABLE} ({names_sql}) SELECT * FROM unnest("
            f"{', '.join(_array(f) for f in _CP_INSERT)}) AS c({names_sql}) "
            f"WHERE c.{_q('run_id')} IN (SELECT {_q('id')} FROM lease))"
        )
        params += [[_prep(f, _cp_value(run_id, rec, f)) for run_id, rec in creates] for f in _CP_INSERT]
    updates = [(p.run.lease.run_id, u) for p in plans for u in p.updates]
    if updates:
        fields = [_CP_FIELD[name] for name in CHECKPOINT_UPDATABLE]
        ucols = [_col(f) for f in fields]
        usets = [
            f"{c} = " + (_KEEP_IF_UNSET[f.name].format(c=c) if f.name in _KEEP_IF_UNSET else f"u.{c}")
            for f, c in zip(fields, ucols, strict=True)
        ]
        ctes.append(
            f"upd AS (UPDATE {CP_TABLE} cp SET {', '.join(usets)} FROM unnest(%s::varchar[], %s::integer[], "
            f"%s::text[], {', '.join(_array(f) for f in fields)}) AS u(u_run, u_seq, u_expect, {', '.join(ucols)}) "
            f"WHERE cp.{_q('run_id')} = u.u_run AND cp.{_q('seq')} = u.u_seq "
            f"AND cp.{_q('status')} = ANY(string_to_array(u.u_expect, ',')) "
            f"AND u.u_run IN (SELECT {_q('id')} FROM lease))"
        )
        params += [[u[0] for u in updates], [u[1].seq for u in updates], [",".join(u[1].expect) for u in updates]]
        params += [[_prep(f, u.values[f.name]) for _, u in updates] for f in fields]
    rows = execute(f"WITH {', '.join(ctes)} SELECT * FROM lease", params)
    return {run_id: (wake, bool(awaited)) for run_id, wake, awaited in rows}


def poke_if_settled(run_id: str, seqs: list[int], now: datetime) -> bool:
    """Wake a run that just suspended if one of the steps it waits on settled meanwhile.

    Run after the suspending commit: a result that committed before it found the
    run still running and left the wake to us; one that commits after it wakes
    the run itself.
    """
    sql = (
        f"UPDATE {RUN_TABLE} SET {_q('wake_at')} = %s WHERE {_q('id')} = %s AND {_q('status')} = %s "
        f"AND EXISTS (SELECT 1 FROM {CP_TABLE} WHERE {_q('run_id')} = %s AND {_q('seq')} = ANY(%s) "
        f"AND {_q('status')} IN ('completed', 'failed')) RETURNING 1"
    )
    return bool(execute(sql, [now, run_id, RunStatus.SUSPENDED, run_id, seqs]))


def lease_held(run_id: str, owner: str) -> bool:
    sql = f"SELECT 1 FROM {RUN_TABLE} WHERE {_q('id')} = %s AND {_q('status')} = %s AND {_q('locked_by')} = %s"
    return bool(execute(sql, [run_id, RunStatus.RUNNING, owner]))


# -- dispatched steps ---------------------------------------------------------------
_CLAIM = (
    f"UPDATE {CP_TABLE} c SET {_q('status')} = 'running', {_q('attempts')} = c.{_q('attempts')} + 1, "
    f"{_q('locked_by')} = %s, {_q('wake_at')} = %s, {_q('dispatches')} = 0, {_q('started_at')} = %s, "
    f"{_q('timeout_at')} = NULL FROM {RUN_TABLE} r "
    f"WHERE c.{_q('run_id')} = %s AND c.{_q('seq')} = %s AND c.{_q('kind')} = 'step' AND c.{_q('status')} = 'pending' "
    f"AND (c.{_q('retry_at')} IS NULL OR c.{_q('retry_at')} <= %s) AND r.{_q('id')} = c.{_q('run_id')} "
    f"AND r.{_q('status')} = ANY(%s) "
    f"RETURNING c.{_q('id')}, c.{_q('name')}, c.{_q('input')}, c.{_q('attempts')}, r.{_q('namespace')}"
)


def claim_step(
    run_id: str, seq: int, owner: str, now: datetime, lease_until: datetime
) -> tuple[int, str, Any, int, str] | None:
    """Claim a pending, due step of an active run: one UPDATE that locks the checkpoint row only.

    The run row is read, not locked (the run row is locked first everywhere
    else); a cancel racing the claim is settled by the result write, which
    drops results for cancelled runs.
    """
    rows = execute(_CLAIM, [owner, lease_until, now, run_id, seq, now, _ACTIVE])
    if not rows:
        return None
    cp_id, name, raw_input, attempts, namespace = rows[0]
    value = _CP_FIELD["input"].from_db_value(raw_input, None, connection) if raw_input is not None else None  # type: ignore[attr-defined]
    return cp_id, name, value, attempts, namespace


def set_step_timeout(cp_id: int, timeout_at: datetime) -> None:
    execute(f"UPDATE {CP_TABLE} SET {_q('timeout_at')} = %s WHERE {_q('id')} = %s", [timeout_at, cp_id])


def finish_step(
    run_id: str,
    seq: int,
    now: datetime,
    output: Any,
    error: dict[str, Any] | None,
    take: tuple[str, datetime] | None,
) -> tuple[str | None, RunRecord | None]:
    """Settle a running or pending step and wake its run, in one statement.

    The run row is locked first (``FOR UPDATE``, latest committed version),
    then the checkpoint. Nothing is settled for a missing, cancelled or
    completed run. A suspended run is woken; with ``take=(owner,
    lease_until)`` it is instead leased to ``owner`` at once (the caller runs
    its next turn: no wake write, no separate acquire). Returns the run's
    status as found and the run as leased (or None).
    """
    settled = "failed" if error is not None else "completed"
    out_field, err_field = _CP_FIELD["output"], _CP_FIELD["error"]
    params: list[Any] = [run_id]
    if take is not None:
        owner, lease_until = take
        wake = (
            f"{_q('status')} = 'running', {_q('locked_by')} = %s, {_q('locked_until')} = %s, "
            f"{_q('updated_at')} = %s, {_q('turns')} = d.{_q('turns')} + 1, "
            f"{_q('started_at')} = COALESCE(d.{_q('started_at')}, %s)"
        )
        params += [owner, lease_until, now, now]
    else:
        wake = f"{_q('wake_at')} = %s"
        params.append(now)
    sql = (
        f"WITH old AS (SELECT {_q('id')}, {_q('status')} FROM {RUN_TABLE} WHERE {_q('id')} = %s FOR UPDATE), "
        f"woke AS (UPDATE {RUN_TABLE} d SET {wake} FROM old WHERE d.{_q('id')} = old.{_q('id')} "
        f"AND old.{_q('status')} = 'suspended' RETURNING {_run_select('d')}), "
        f"cp AS (UPDATE {CP_TABLE} SET {_q('status')} = %s, {_q('output')} = {_param(out_field)}, "
        f"{_q('error')} = {_param(err_field)}, {_q('wake_at')} = NULL, {_q('finished_at')} = %s, "
        f"{_q('locked_by')} = NULL WHERE {_q('run_id')} = %s AND {_q('seq')} = %s "
        f"AND {_q('status')} IN ('pending', 'running') "
        f"AND EXISTS (SELECT 1 FROM old WHERE {_q('status')} NOT IN ('cancelled', 'completed'))) "
        f"SELECT old.{_q('status')}, woke.* FROM old LEFT JOIN woke ON true"
    )
    params += [
        settled,
        _prep(out_field, output if error is None else None),
        _prep(err_field, error),
        now,
        run_id,
        seq,
    ]
    rows = execute(sql, params)
    if not rows:
        return None, None
    status, *run = rows[0]
    if take is None or run[0] is None:
        return status, None
    return status, to_run(run)


# -- leases and history -------------------------------------------------------------
_ACQUIRE = (
    f"UPDATE {RUN_TABLE} SET {_q('status')} = 'running', {_q('locked_by')} = %s, {_q('locked_until')} = %s, "
    f"{_q('updated_at')} = %s, {_q('started_at')} = COALESCE({_q('started_at')}, %s), "
    f"{_q('turns')} = {_q('turns')} + 1 WHERE {_q('id')} = %s AND ({_q('status')} = 'pending' "
    f"OR ({_q('status')} = 'suspended' AND {_q('wake_at')} <= %s)) RETURNING {_run_select(RUN_TABLE)}"
)


def acquire(run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
    rows = execute(_ACQUIRE, [owner, lease_until, now, now, run_id, now])
    return to_run(rows[0]) if rows else None


_CP_LOAD = [_CP_FIELD[name] for name in CheckpointRecord.__dataclass_fields__ if name != "seq"]
_LOAD = (
    f"SELECT {_q('seq')}, {', '.join(_col(f) for f in _CP_LOAD)} FROM {CP_TABLE} "
    f"WHERE {_q('run_id')} = %s ORDER BY {_q('seq')}"
)


def load_checkpoints(run_id: str) -> dict[int, CheckpointRecord]:
    return {seq: CheckpointRecord(seq=seq, **_from_db(_CP_LOAD, values)) for seq, *values in execute(_LOAD, [run_id])}


_LOAD_MANY = (
    f"SELECT {_q('run_id')}, {_q('seq')}, {', '.join(_col(f) for f in _CP_LOAD)} FROM {CP_TABLE} "
    f"WHERE {_q('run_id')} = ANY(%s) ORDER BY {_q('run_id')}, {_q('seq')}"
)


def load_histories(run_ids: list[str]) -> dict[str, dict[int, CheckpointRecord]]:
    histories: dict[str, dict[int, CheckpointRecord]] = {}
    for run_id, seq, *values in execute(_LOAD_MANY, [run_ids]):
        histories.setdefault(run_id, {})[seq] = CheckpointRecord(seq=seq, **_from_db(_CP_LOAD, values))
    return histories


def wake_waiters(tokens: list[str], now: datetime) -> list[str]:
    """Wake the suspended runs with a waiter on any of ``tokens``, in one statement; their ids."""
    waiter = _q(SignalWaiter._meta.db_table)
    sql = (
        f"UPDATE {RUN_TABLE} SET {_q('wake_at')} = %s WHERE {_q('status')} = 'suspended' AND {_q('id')} IN "
        f"(SELECT {_q('run_id')} FROM {waiter} WHERE {_q('name')} = ANY(%s)) RETURNING {_q('id')}"
    )
    return [row[0] for row in execute(sql, [now, tokens])]
