"""Every SQL statement of the stores, by name, in one place.

The texts are built once from the models' columns. Those under "any Django
database" run on the portable store's backends too (standard SQL, quoted
identifiers); the rest are PostgreSQL's single-statement forms of the hot
path: data-modifying CTEs, arrays per column, ``FOR UPDATE SKIP LOCKED``.
Statements whose text depends on a plan (a commit writes as many
checkpoints as its turn made) are built by :class:`PostgresStatements`,
which also casts parameters for the connection it serves.

Concurrency rules every statement here keeps: the run row is locked before
its checkpoints; a lease holder's write is conditional on ``status`` and
``locked_by`` in the same statement; where a statement must see the latest
committed state of a row it waits for, it locks that row in a ``FOR
UPDATE`` CTE and filters on that CTE's output, never on the statement's
snapshot (taken before the wait).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import Field, JSONField

from durable.codecs.fields import PayloadField
from durable.engine.plan import CHECKPOINT_UPDATABLE, CommitPlan
from durable.engine.plan_steps import STEP_RESULT_IGNORED, StepResultPlan
from durable.engine.ports import CheckpointRecord
from durable.engine.vocab import SETTLED, UNSETTLED, Admission, CheckpointKind, CheckpointStatus, RunStatus
from durable.models import BufferedSignal, Checkpoint, Run, Schedule, SignalWaiter
from durable.schedules.plan import FIRE_COLUMNS, SchedulePlan


def q(name: str) -> str:
    """A quoted identifier (standard SQL; PostgreSQL and SQLite both take it)."""
    return '"' + name.replace('"', '""') + '"'


def _in(values: Sequence[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _unindexed(column: str) -> str:
    """``column`` in a form no index serves (its value unchanged: the columns it wraps are never '').

    A statement that finds its row by primary key writes its other conditions
    so: a generic plan made from stale statistics could otherwise take the
    index that leads with the status and walk every run of that status.
    """
    return f"COALESCE({q(column)}, '')"


RUN_TABLE = q(Run._meta.db_table)
CP_TABLE = q(Checkpoint._meta.db_table)
WAITER_TABLE = q(SignalWaiter._meta.db_table)
SIGNAL_TABLE = q(BufferedSignal._meta.db_table)
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
# Claim a pending, due step of an active run, locking the checkpoint row only.
# Params: owner, lease_until, now, run_id, seq, now, run statuses, now, now.
PG_CLAIM_STEP = (
    f"UPDATE {CP_TABLE} c SET {q('status')} = '{CheckpointStatus.RUNNING}', "
    f"{q('attempts')} = c.{q('attempts')} + 1, {q('locked_by')} = %s, {q('wake_at')} = %s, "
    f"{q('dispatches')} = 0, {q('started_at')} = %s, {q('timeout_at')} = NULL FROM {RUN_TABLE} r "
    f"WHERE c.{q('run_id')} = %s AND c.{q('seq')} = %s AND c.{q('kind')} = '{CheckpointKind.STEP}' "
    f"AND c.{q('status')} = '{CheckpointStatus.PENDING}' "
    f"AND (c.{q('retry_at')} IS NULL OR c.{q('retry_at')} <= %s) AND r.{q('id')} = c.{q('run_id')} "
    f"AND r.{q('status')} = ANY(%s) "
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

# A checkpoint update in a shared commit writes every updatable column; those a single
# commit leaves as stored when unset (plan.KEEP_IF_UNSET) keep their stored value here.
_KEEP_IF_UNSET = {"started_at": "COALESCE(u.{c}, cp.{c})", "attempts": "COALESCE(NULLIF(u.{c}, 0), cp.{c})"}


SCHEDULE_TABLE = q(Schedule._meta.db_table)
SCHEDULE_FIELD = {f.name: f for f in Schedule._meta.concrete_fields}


class PostgresStatements:
    """The PostgreSQL statements whose text or parameters depend on the columns' types.

    Parameters carry explicit casts (a parameter in a SELECT list, as in
    ``INSERT ... SELECT``, has no column to infer its type from) and JSON is
    adapted with each field's encoder. Texts depend only on a plan's shape,
    so each is prepared once per connection.
    """

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._casts: dict[Field[Any, Any], str] = {}

    def param(self, field: Field[Any, Any]) -> str:
        cast = self._casts.get(field)
        if cast is None:
            cast = self._casts[field] = f"%s::{field.cast_db_type(self._connection)}"
        return cast

    def array(self, field: Field[Any, Any]) -> str:
        return self.param(field) + "[]"

    def prep(self, field: Field[Any, Any], value: Any) -> Any:
        # What get_db_prep_save does for these column types on PostgreSQL, without its layers:
        # JSON is adapted with the field's encoder; strings, numbers and aware datetimes pass as is.
        if isinstance(field, JSONField):
            if value is None:
                return None
            if isinstance(field, PayloadField):
                value = field.seal(value)
            return self._connection.ops.adapt_json_value(value, field.encoder)
        return value

    def _cp_value(self, run_id: str, rec: CheckpointRecord, field: Field[Any, Any]) -> Any:
        if field.name == "run":
            value: Any = run_id
        elif field.name in _CP_RECORD:
            value = getattr(rec, field.name)
        else:
            value = field.get_default()
        return self.prep(field, value)

    def _sets(self, fields: Mapping[str, Any], table: dict[str, Field[Any, Any]], params: list[Any]) -> list[str]:
        parts = []
        for name, value in fields.items():
            field = table[name]
            parts.append(f"{col(field)} = {self.param(field)}")
            params.append(self.prep(field, value))
        return parts

    # -- a commit plan of shape BATCH or STATEMENT, as one statement ----------------
    def commit(self, plan: CommitPlan) -> tuple[str, list[Any]]:
        """The lease compare-and-set first; every other part reads its output (a lost lease writes nothing).

        The parts: the step claims the plan settles (checked in the lease
        condition), checkpoint updates and inserts, the consumed signals'
        delete and the clear of the run's waiter rows. A finished run's
        waiters are woken by the store after it, only when ``awaited`` (as
        locked) says some run registered a wait on it.

        Returns rows of ``(wake_at, awaited)``: one when written, none when refused.
        """
        run, lease = plan.run, plan.run.lease
        params: list[Any] = []
        sets = self._sets(run.sets, RUN_FIELD, params)
        if run.cancel_wake is not None:
            sets.append(
                f"{q('wake_at')} = CASE WHEN {q('cancel_requested')} THEN %s::timestamptz ELSE %s::timestamptz END"
            )
            params += [run.cancel_wake.now, run.cancel_wake.wake_at]
        claimed = [u for u in plan.updates if u.claimed_by is not None]
        # Steps this process claimed must still be claimed by it: checked on the locked row
        # (latest version), as part of the lease condition, so a miss writes nothing at all.
        claims = "".join(
            f" AND EXISTS (SELECT 1 FROM {CP_TABLE} WHERE {q('run_id')} = %s AND {q('seq')} = %s "
            f"AND {q('status')} = ANY(%s) AND {q('locked_by')} = %s FOR UPDATE)"
            for _ in claimed
        )
        returning = f"{q('wake_at')}, {q('awaited')}"
        if sets:
            cas = f"UPDATE {RUN_TABLE} SET {', '.join(sets)} WHERE {_LEASED}{claims} RETURNING {returning}"
        else:
            # Nothing to change on the run: a share lock is enough to serialise with a cancel
            # or a takeover (both update the row), and costs no new row version.
            cas = f"SELECT {returning} FROM {RUN_TABLE} WHERE {_LEASED}{claims} FOR SHARE"
        ctes = [f"lease AS ({cas})"]
        params += [lease.run_id, lease.status, lease.owner]
        for u in claimed:
            params += [lease.run_id, u.seq, list(u.expect), u.claimed_by]
        for i, u in enumerate(plan.updates):
            cols = ", ".join(self._sets(u.written(), CP_FIELD, params))
            ctes.append(
                f"u{i} AS (UPDATE {CP_TABLE} SET {cols} WHERE {q('run_id')} = %s AND {q('seq')} = %s "
                f"AND {q('status')} = ANY(%s) AND EXISTS (SELECT 1 FROM lease))"
            )
            params += [lease.run_id, u.seq, list(u.expect)]
        if plan.inserts:
            row = f"SELECT {', '.join(self.param(f) for f in CP_INSERT)} FROM lease"
            for rec in plan.inserts:
                params += [self._cp_value(lease.run_id, rec, f) for f in CP_INSERT]
            names = ", ".join(col(f) for f in CP_INSERT)
            ctes.append(f"ins AS (INSERT INTO {CP_TABLE} ({names}) {' UNION ALL '.join([row] * len(plan.inserts))})")
        ctes += self._consumed_and_cleared(plan, params)
        return f"WITH {', '.join(ctes)} SELECT {returning} FROM lease", params

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
            arrays.append(self.array(field))
            sets.append(f"{col(field)} = v.{col(field)}")
            params.append([self.prep(field, p.run.sets[name]) for p in plans])
        if first.cancel_wake is not None:
            cols += ["cw_now", "cw_wake"]
            arrays += ["%s::timestamptz[]", "%s::timestamptz[]"]
            wakes = [p.run.cancel_wake for p in plans if p.run.cancel_wake is not None]
            params += [[w.now for w in wakes], [w.wake_at for w in wakes]]
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
        names = ", ".join(col(f) for f in CP_INSERT)
        params += [[self._cp_value(run_id, rec, f) for run_id, rec in creates] for f in CP_INSERT]
        return [
            f"ins AS (INSERT INTO {CP_TABLE} ({names}) SELECT * FROM unnest("
            f"{', '.join(self.array(f) for f in CP_INSERT)}) AS c({names}) "
            f"WHERE c.{q('run_id')} IN (SELECT {q('id')} FROM lease))"
        ]

    def _shared_updates(self, plans: Sequence[CommitPlan], params: list[Any]) -> list[str]:
        updates = [(p.run.lease.run_id, u) for p in plans for u in p.updates]
        if not updates:
            return []
        fields = [CP_FIELD[name] for name in CHECKPOINT_UPDATABLE]
        ucols = [col(f) for f in fields]
        usets = [
            f"{c} = " + (_KEEP_IF_UNSET[f.name].format(c=c) if f.name in _KEEP_IF_UNSET else f"u.{c}")
            for f, c in zip(fields, ucols, strict=True)
        ]
        params += [[u[0] for u in updates], [u[1].seq for u in updates], [",".join(u[1].expect) for u in updates]]
        params += [[self.prep(f, u.values[f.name]) for _, u in updates] for f in fields]
        return [
            f"upd AS (UPDATE {CP_TABLE} cp SET {', '.join(usets)} FROM unnest(%s::varchar[], %s::integer[], "
            f"%s::text[], {', '.join(self.array(f) for f in fields)}) AS u(u_run, u_seq, u_expect, {', '.join(ucols)}) "
            f"WHERE cp.{q('run_id')} = u.u_run AND cp.{q('seq')} = u.u_seq "
            f"AND cp.{q('status')} = ANY(string_to_array(u.u_expect, ',')) "
            f"AND u.u_run IN (SELECT {q('id')} FROM lease))"
        ]

    # -- a step result ----------------------------------------------------------------
    def finish_step(
        self, take: bool, claimed: bool = False, notify: bool = False, read: tuple[str, str] | None = None
    ) -> str:
        """Settle an open step and wake (or, ``take``, lease) its suspended run, run row locked first.

        Nothing is settled for a missing run or one whose results are ignored;
        ``claimed``: nor unless the step still runs under the result's claim;
        ``notify``: a run woken is announced on :data:`NOTIFY_CHANNEL` (on commit).
        Params: :meth:`finish_step_params`. Returns one row, the run's status
        as found followed by the run's columns as leased (NULLs when not woken).
        ``read``: the CTEs and SELECT of a read that rides along (its params
        follow); then every row continues with whether the step was settled
        and one row of that read.
        """
        if take:
            wake = (
                f"{q('status')} = '{RunStatus.RUNNING}', {q('locked_by')} = %s, {q('locked_until')} = %s, "
                f"{q('updated_at')} = %s, {q('turns')} = d.{q('turns')} + 1, "
                f"{q('started_at')} = COALESCE(d.{q('started_at')}, %s)"
            )
        else:
            wake = f"{q('wake_at')} = %s"
        claim = (
            f"AND {q('status')} = '{CheckpointStatus.RUNNING}' AND {q('locked_by')} = %s AND {q('attempts')} = %s "
            if claimed
            else ""
        )
        sql = (
            f"WITH old AS (SELECT {q('id')}, {q('status')} FROM {RUN_TABLE} WHERE {q('id')} = %s FOR UPDATE), "
            f"woke AS (UPDATE {RUN_TABLE} d SET {wake} FROM old WHERE d.{q('id')} = old.{q('id')} "
            f"AND old.{q('status')} = '{RunStatus.SUSPENDED}' RETURNING {run_columns('d')}), "
            f"cp AS (UPDATE {CP_TABLE} SET {q('status')} = %s, {q('output')} = {self.param(CP_FIELD['output'])}, "
            f"{q('error')} = {self.param(CP_FIELD['error'])}, {q('wake_at')} = NULL, {q('finished_at')} = %s, "
            f"{q('locked_by')} = NULL WHERE {q('run_id')} = %s AND {q('seq')} = %s "
            f"AND {q('status')} IN ({_in(UNSETTLED)}) {claim}"
            f"AND EXISTS (SELECT 1 FROM old WHERE {q('status')} NOT IN ({_in(STEP_RESULT_IGNORED)})) "
            f"{'RETURNING 1' if read else ''}) "
        )
        # (A volatile function: the join is never removed, and runs once, only for a woken run.)
        announce = (
            f" LEFT JOIN LATERAL (SELECT pg_notify('{NOTIFY_CHANNEL}', woke.{q('namespace')}) "
            f"WHERE woke.{q('id')} IS NOT NULL) announced ON true"
            if notify
            else ""
        )
        if read is None:
            return f"{sql}SELECT old.{q('status')}, woke.* FROM old LEFT JOIN woke ON true{announce}"
        ctes, select = read
        return (
            f"{sql}, {ctes} SELECT old.{q('status')}, woke.*, EXISTS (SELECT 1 FROM cp), rd.* "
            f"FROM old LEFT JOIN woke ON true{announce} LEFT JOIN ({select}) rd ON true"
        )

    def finish_step_params(self, result: StepResultPlan) -> list[Any]:
        params: list[Any] = [result.run_id]
        if result.take is not None:
            owner, lease_until = result.take
            params += [owner, lease_until, result.now, result.now]
        else:
            params.append(result.now)
        sets = result.sets
        return [
            *params,
            sets["status"],
            self.prep(CP_FIELD["output"], sets["output"]),
            self.prep(CP_FIELD["error"], sets["error"]),
            sets["finished_at"],
            result.run_id,
            result.seq,
            *((result.claim.owner, result.claim.attempt) if result.claim is not None else ()),
        ]

    # -- a page of schedule firings, as two statements ------------------------------------
    def fire_schedules(self, plans: Sequence[SchedulePlan]) -> tuple[str, list[Any]]:
        """Every plan's FIRE_COLUMNS, compare-and-set on (key, revision); returns the keys written."""
        names = ("key", "revision", *FIRE_COLUMNS)
        arrays = ", ".join(self.array(SCHEDULE_FIELD[name]) for name in names)
        sets = ", ".join(f"{q(name)} = v.{q(name)}" for name in FIRE_COLUMNS)
        sql = (
            f"UPDATE {SCHEDULE_TABLE} AS s SET {sets}, {q('revision')} = s.{q('revision')} + 1 "
            f"FROM unnest({arrays}) AS v({', '.join(q(n) for n in names)}) "
            f"WHERE s.{q('key')} = v.{q('key')} AND s.{q('revision')} = v.{q('revision')} RETURNING s.{q('key')}"
        )
        columns: list[list[Any]] = [[p.key for p in plans], [p.revision for p in plans]]
        columns += [[p.changes[name] for p in plans] for name in FIRE_COLUMNS]
        return sql, columns

    def insert_runs(self, rows: Sequence[dict[str, Any]]) -> tuple[str, list[Any]]:
        """New runs in one statement, idempotent on id (``ON CONFLICT DO NOTHING``); returns the ids inserted."""
        sql = (
            f"INSERT INTO {RUN_TABLE} ({run_columns()}) SELECT * FROM unnest("
            f"{', '.join(self.array(f) for f in RUN_COLUMNS)}) ON CONFLICT ({q('id')}) DO NOTHING RETURNING {q('id')}"
        )
        models = [Run(**row) for row in rows]
        return sql, [[self.prep(f, getattr(m, f.attname)) for m in models] for f in RUN_COLUMNS]
