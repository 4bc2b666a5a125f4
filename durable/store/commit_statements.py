"""A turn's commit as one PostgreSQL statement: its text per plan shape, its parameters per plan.

:class:`CommitStatements` is the part of
:class:`~durable.store.typed_statements.PostgresStatements` that writes
commit plans (:mod:`durable.engine.plan`) of shape ``BATCH`` or
``STATEMENT``: one plan (:meth:`CommitStatements.commit`) or several of one
batch key (:meth:`CommitStatements.commit_many`). It also owns the typed
parameters every PostgreSQL statement uses: an explicit cast per column
(a parameter in a SELECT list has no column to infer its type from) and JSON
as its text, encoded with the field's encoder (sealed by the codec for payload
columns): a string the server parses into the cast or column's ``jsonb``.

The lease compare-and-set is always the first CTE and every other part reads
its output, so a lost lease writes nothing. Texts are cached per shape in a
dict shared by the store's threads: an entry is an immutable text, so two
threads may build one twice but never read a wrong one.
"""

from __future__ import annotations

from collections.abc import Sequence
from json import dumps as json_text
from typing import Any

from django.db.models import Field, JSONField

from durable.codecs.fields import PayloadField
from durable.engine.plan import CHECKPOINT_UPDATABLE, CheckpointChange, CommitPlan
from durable.engine.ports import CheckpointRecord
from durable.store.statements import (
    _CP_RECORD,
    _LEASED,
    CP_FIELD,
    CP_INSERT,
    CP_TABLE,
    QUEUE_TABLE,
    RUN_COLUMNS,
    RUN_FIELD,
    RUN_TABLE,
    SIGNAL_ID,
    SIGNAL_TABLE,
    STATUSES,
    WAITER_TABLE,
    col,
    column_params,
    q,
    spread,
    statuses,
)

# A checkpoint update in a shared commit writes every updatable column; those a single
# commit leaves as stored when unset (plan.KEEP_IF_UNSET) keep their stored value here.
_KEEP_IF_UNSET = {"started_at": "COALESCE(u.{c}, cp.{c})", "attempts": "COALESCE(NULLIF(u.{c}, 0), cp.{c})"}
_RUN_ID = "run"
# Where each inserted checkpoint column's value comes from (the run's id, a record field, or the
# field's default), and whether it is JSON (adapted) or passes as is; worked out once.
_CP_SOURCES: list[tuple[Field[Any, Any], str | None, bool]] = [
    (f, _RUN_ID if f.name == "run" else f.name if f.name in _CP_RECORD else None, isinstance(f, JSONField))
    for f in CP_INSERT
]
# The JSON columns of a checkpoint and of a run by name: only they are adapted when a commit writes them.
_CP_JSON = {name: field for name, field in CP_FIELD.items() if isinstance(field, JSONField)}
_RUN_JSON = {name: field for name, field in RUN_FIELD.items() if isinstance(field, JSONField)}
# A new run's columns in insert order: attribute name, field, and whether it is JSON (adapted).
_RUN_ROW: list[tuple[str, Field[Any, Any], bool]] = [(f.attname, f, isinstance(f, JSONField)) for f in RUN_COLUMNS]
# Commit texts kept per statements object (one per shape; the shapes a project's workflows make are few).
_TEXTS_KEPT = 256
# Up to this many checkpoints inserted (or updated) by one commit are written row by row, each
# with its own parameters; more go as one array per column. A fan-out of thousands of steps would
# otherwise cost a planning time that grows with the square of its rows and, past about 2,600
# rows, more parameters than a statement may have (65,535).
_INLINE_ROWS = 32
# What the one-run commit's array writes are conditional on: its lease's write.
_LEASE_WROTE = "EXISTS (SELECT 1 FROM lease)"


def _commit_shape(plan: CommitPlan) -> tuple[Any, ...]:
    """What :meth:`PostgresStatements.commit`'s text depends on (two plans of one shape share a text)."""
    run = plan.run
    return (
        tuple(run.sets),
        run.cancel_wake is not None,
        tuple((u.claimed_by is not None, tuple(u.written())) for u in plan.updates),
        min(len(plan.inserts), _INLINE_ROWS + 1),  # more than _INLINE_ROWS: one text, arrays
        len(plan.updates) > _INLINE_ROWS,
        bool(plan.consumed_signals),
        plan.waiters is not None and plan.waiters.clear,
        plan.waiters is not None and bool(plan.waiters.add),
        bool(plan.waited_queues),
    )


class CommitStatements:
    """Typed parameters, and the commit statements built from them (see the module's docstring)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._casts: dict[Field[Any, Any], str] = {}
        self._commit_texts: dict[tuple[Any, ...], str] = {}

    def param(self, field: Field[Any, Any]) -> str:
        cast = self._casts.get(field)
        if cast is None:
            cast = self._casts[field] = f"%s::{field.cast_db_type(self._connection)}"
        return cast

    def array(self, field: Field[Any, Any]) -> str:
        return self.param(field) + "[]"

    def column(self, field: Field[Any, Any]) -> str:
        """An array of ``field``'s values in a shared commit, or one value repeated: params :func:`column_params`."""
        return spread(self.param(field))

    def prep(self, field: Field[Any, Any], value: Any) -> Any:
        # What get_db_prep_save does for these column types on PostgreSQL, without its layers:
        # JSON is its text, encoded with the field's encoder (the statements cast it to jsonb, or
        # insert it into a jsonb column, so the server parses it as it would the driver's JSON
        # adapter's text); strings, numbers and aware datetimes pass as is.
        if isinstance(field, JSONField):
            if value is None:
                return None
            if isinstance(field, PayloadField):
                value = field.seal(value)
            return json_text(value, cls=field.encoder)
        return value

    def run_row(self, values: dict[str, Any]) -> list[Any]:
        """A new run's values in ``RUN_COLUMNS`` order, prepared: from ``values`` by attribute name, else the default.

        Raises ``TypeError`` (as a model's constructor would) when ``values`` names a column a run does not have.
        """
        prep, row, found = self.prep, [], 0
        for name, field, json in _RUN_ROW:
            if name in values:
                found += 1
                value = values[name]
            else:
                value = field.get_default()
            row.append(prep(field, value) if json else value)
        if found != len(values):
            unknown = sorted(set(values) - {name for name, _, _ in _RUN_ROW})
            raise TypeError(f"a run has no column {', '.join(unknown)}")
        return row

    # -- a commit plan of shape BATCH or STATEMENT, as one statement ----------------
    def commit(self, plan: CommitPlan) -> tuple[str, list[Any]]:
        """The lease compare-and-set first; every other part reads its output (a lost lease writes nothing).

        The parts: the step claims the plan settles (checked in the lease
        condition), checkpoint updates and inserts, the consumed signals'
        delete and the clear of the run's waiter rows. A finished run's
        waiters are woken by the store after it, only when ``awaited`` (as
        locked) says some run registered a wait on it.

        The text depends only on the plan's shape (:func:`_commit_shape`) and
        is built once per shape; the parameters, in the text's order, are
        built for every plan. Returns rows of ``(wake_at, awaited)``: one
        when written, none when refused.
        """
        shape = _commit_shape(plan)
        text = self._commit_texts.get(shape)
        if text is None:
            if len(self._commit_texts) >= _TEXTS_KEPT:
                self._commit_texts.clear()
            text = self._commit_texts[shape] = self._commit_text(plan)
        return text, self._commit_params(plan)

    def _commit_text(self, plan: CommitPlan) -> str:
        run = plan.run
        sets = [f"{col(RUN_FIELD[name])} = {self.param(RUN_FIELD[name])}" for name in run.sets]
        if run.cancel_wake is not None:
            sets.append(
                f"{q('wake_at')} = CASE WHEN {q('cancel_requested')} THEN %s::timestamptz ELSE %s::timestamptz END"
            )
        # Steps this process claimed must still be claimed by it: checked on the locked row
        # (latest version), as part of the lease condition, so a miss writes nothing at all.
        claims = "".join(
            f" AND EXISTS (SELECT 1 FROM {CP_TABLE} WHERE {q('run_id')} = %s AND {q('seq')} = %s "
            f"AND {q('status')} = ANY({STATUSES}) AND {q('locked_by')} = %s FOR UPDATE)"
            for u in plan.updates
            if u.claimed_by is not None
        )
        returning = f"{q('wake_at')}, {q('awaited')}"
        if sets:
            cas = f"UPDATE {RUN_TABLE} SET {', '.join(sets)} WHERE {_LEASED}{claims} RETURNING {returning}"
        else:
            # Nothing to change on the run: a share lock is enough to serialise with a cancel
            # or a takeover (both update the row), and costs no new row version.
            cas = f"SELECT {returning} FROM {RUN_TABLE} WHERE {_LEASED}{claims} FOR SHARE"
        ctes = [f"lease AS ({cas})"]
        if len(plan.updates) > _INLINE_ROWS:
            ctes += self._updates_text(_LEASE_WROTE)
        else:
            for i, u in enumerate(plan.updates):
                cols = ", ".join(f"{col(CP_FIELD[name])} = {self.param(CP_FIELD[name])}" for name in u.written())
                ctes.append(
                    f"u{i} AS (UPDATE {CP_TABLE} SET {cols} WHERE {q('run_id')} = %s AND {q('seq')} = %s "
                    f"AND {q('status')} = ANY({STATUSES}) AND {_LEASE_WROTE})"
                )
        if len(plan.inserts) > _INLINE_ROWS:
            ctes += self._inserts_text(_LEASE_WROTE)
        elif plan.inserts:
            row = f"SELECT {', '.join(self.param(f) for f in CP_INSERT)} FROM lease"
            names = ", ".join(col(f) for f in CP_INSERT)
            ctes.append(f"ins AS (INSERT INTO {CP_TABLE} ({names}) {' UNION ALL '.join([row] * len(plan.inserts))})")
        if plan.waited_queues:
            # Rewritten (a new version) under a row lock: see durable.store.queue_statements.
            ctes.append(
                f"qw AS (UPDATE {QUEUE_TABLE} SET {q('updated_at')} = %s WHERE {q('name')} = ANY(%s::text[]) "
                f"AND EXISTS (SELECT 1 FROM lease))"
            )
        ctes += self._consumed_and_cleared(plan, [])
        return f"WITH {', '.join(ctes)} SELECT {returning} FROM lease"

    def _commit_params(self, plan: CommitPlan) -> list[Any]:
        """The parameters of :meth:`_commit_text`'s text for ``plan``, in the text's order."""
        run, lease = plan.run, plan.run.lease
        prep = self.prep
        params: list[Any] = [
            prep(_RUN_JSON[name], value) if name in _RUN_JSON else value for name, value in run.sets.items()
        ]
        if run.cancel_wake is not None:
            params += [run.cancel_wake.now, run.cancel_wake.wake_at]
        params += [lease.run_id, lease.status, lease.owner]
        for u in plan.updates:
            if u.claimed_by is not None:
                params += [lease.run_id, u.seq, statuses(u.expect), u.claimed_by]
        if len(plan.updates) > _INLINE_ROWS:
            self._updates_params([(lease.run_id, u) for u in plan.updates], params)
        else:
            for u in plan.updates:
                params += [
                    prep(_CP_JSON[name], value) if name in _CP_JSON else value for name, value in u.written().items()
                ]
                params += [lease.run_id, u.seq, statuses(u.expect)]
        if len(plan.inserts) > _INLINE_ROWS:
            rows = [self._insert_values(lease.run_id, rec) for rec in plan.inserts]
            for column in zip(*rows, strict=True):  # one array per column
                params += column_params(list(column))
        else:
            for rec in plan.inserts:
                params += self._insert_values(lease.run_id, rec)
        if plan.waited_queues:
            params += [plan.now, list(plan.waited_queues)]
        self._consumed_and_cleared(plan, params)
        return params

    def _insert_values(self, run_id: str, rec: CheckpointRecord) -> list[Any]:
        """One checkpoint row's values in :data:`CP_INSERT` order, prepared for their columns."""
        values: list[Any] = []
        for field, source, json in _CP_SOURCES:
            if source is _RUN_ID:
                values.append(run_id)
                continue
            value = getattr(rec, source) if source is not None else field.get_default()
            values.append(self.prep(field, value) if json else value)
        return values

    def _consumed_and_cleared(self, plan: CommitPlan, params: list[Any]) -> list[str]:
        """The consumed signals' delete and the waiter rows' clear, each only if the lease CTE wrote.

        Both are found by the run's id (the run's index of each table leads
        with it), so their plans do not depend on how many rows other runs have.
        """
        run_id, ctes = plan.run.lease.run_id, []
        if plan.consumed_signals:
            ctes.append(
                f"sig AS (DELETE FROM {SIGNAL_TABLE} WHERE {q('run_id')} = %s "
                f"AND {col(SIGNAL_ID)} = ANY({self.array(SIGNAL_ID)}) AND EXISTS (SELECT 1 FROM lease))"
            )
            params += [run_id, list(plan.consumed_signals)]
        if plan.waiters is not None and plan.waiters.clear:
            if plan.waiters.add:  # registered by a transaction (their re-check reads after a lock)
                raise ValueError("a commit that registers waiters cannot be one statement")
            ctes.append(f"wt AS (DELETE FROM {WAITER_TABLE} WHERE {q('run_id')} = %s AND EXISTS (SELECT 1 FROM lease))")
            params.append(run_id)
        return ctes

    # -- several plans of one batch key, as one statement ---------------------------
    def commit_many(self, plans: Sequence[CommitPlan]) -> tuple[str, list[Any]]:
        """One statement for plans of one :attr:`CommitPlan.batch_key`, values as one array per column.

        Each run's row is updated only where the owner still holds its lease,
        and only those runs' checkpoints are written. Returns rows of
        ``(run_id, wake_at, awaited)`` for the runs written.
        """
        first = plans[0].run
        ids = [p.run.lease.run_id for p in plans]
        params: list[Any] = [ids]
        cols, arrays, sets = [q("id")], ["%s::varchar[]"], []
        for name in first.sets:
            field = RUN_FIELD[name]
            cols.append(col(field))
            arrays.append(self.column(field))
            sets.append(f"{col(field)} = v.{col(field)}")
            params += column_params([self.prep(field, p.run.sets[name]) for p in plans])
        if first.cancel_wake is not None:
            cols += ["cw_now", "cw_wake"]
            arrays += [spread("%s::timestamptz"), spread("%s::timestamptz")]
            wakes = [p.run.cancel_wake for p in plans if p.run.cancel_wake is not None]
            params += column_params([w.now for w in wakes]) + column_params([w.wake_at for w in wakes])
            sets.append(f"{q('wake_at')} = CASE WHEN r.{q('cancel_requested')} THEN v.cw_now ELSE v.cw_wake END")
        ctes = [
            f"v AS (SELECT * FROM unnest({', '.join(arrays)}) AS v({', '.join(cols)}))",
            # The runs are found by primary key only: the lease condition is written so that no
            # index serves it, or a plan made without statistics may scan every running run.
            f"lease AS (UPDATE {RUN_TABLE} r SET {', '.join(sets)} FROM v WHERE r.{q('id')} = v.{q('id')} "
            f"AND r.{q('id')} = ANY(%s::varchar[]) AND COALESCE(r.{q('status')}, '') = %s "
            f"AND COALESCE(r.{q('locked_by')}, '') = %s "
            f"RETURNING r.{q('id')}, r.{q('wake_at')}, r.{q('awaited')})",
        ]
        params += [ids, first.lease.status, first.lease.owner]
        ctes += self._shared_inserts(plans, params) + self._shared_updates(plans, params)
        return f"WITH {', '.join(ctes)} SELECT * FROM lease", params

    def _shared_inserts(self, plans: Sequence[CommitPlan], params: list[Any]) -> list[str]:
        creates = [(p.run.lease.run_id, rec) for p in plans for rec in p.inserts]
        if not creates:
            return []
        rows = [self._insert_values(run_id, rec) for run_id, rec in creates]
        for column in zip(*rows, strict=True):  # one array per column
            params += column_params(list(column))
        return self._inserts_text(f"c.{q('run_id')} IN (SELECT {q('id')} FROM lease)")

    def _inserts_text(self, written: str) -> list[str]:
        """Checkpoints inserted from one array per column (params: the arrays), where ``written`` holds."""
        names = ", ".join(col(f) for f in CP_INSERT)
        return [
            f"ins AS (INSERT INTO {CP_TABLE} ({names}) SELECT * FROM unnest("
            f"{', '.join(self.column(f) for f in CP_INSERT)}) AS c({names}) WHERE {written})"
        ]

    def _shared_updates(self, plans: Sequence[CommitPlan], params: list[Any]) -> list[str]:
        updates = [(p.run.lease.run_id, u) for p in plans for u in p.updates]
        if not updates:
            return []
        self._updates_params(updates, params)
        return self._updates_text(f"u.u_run IN (SELECT {q('id')} FROM lease)")

    def _updates_params(self, updates: Sequence[tuple[str, CheckpointChange]], params: list[Any]) -> None:
        """The arrays of :meth:`_updates_text`: run ids, positions, expected statuses, then each column."""
        fields = [CP_FIELD[name] for name in CHECKPOINT_UPDATABLE]
        params += [*column_params([u[0] for u in updates]), [u[1].seq for u in updates]]
        params += column_params([statuses(u[1].expect) for u in updates])
        for f in fields:
            params += column_params([self.prep(f, u.values[f.name]) for _, u in updates])

    def _updates_text(self, written: str) -> list[str]:
        """Checkpoint updates from one array per column, each where its status is expected and ``written`` holds."""
        fields = [CP_FIELD[name] for name in CHECKPOINT_UPDATABLE]
        ucols = [col(f) for f in fields]
        usets = [
            f"{c} = " + (_KEEP_IF_UNSET[f.name].format(c=c) if f.name in _KEEP_IF_UNSET else f"u.{c}")
            for f, c in zip(fields, ucols, strict=True)
        ]
        return [
            f"upd AS (UPDATE {CP_TABLE} cp SET {', '.join(usets)} FROM unnest({spread('%s::varchar')}, %s::integer[], "
            f"{spread('%s::text')}, {', '.join(self.column(f) for f in fields)}) "
            f"AS u(u_run, u_seq, u_expect, {', '.join(ucols)}) "
            f"WHERE cp.{q('run_id')} = u.u_run AND cp.{q('seq')} = u.u_seq "
            f"AND cp.{q('status')} = ANY(string_to_array(u.u_expect, ',')) AND {written})"
        ]
