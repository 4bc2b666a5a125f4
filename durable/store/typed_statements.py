"""The PostgreSQL statements whose text or parameters depend on the columns' types.

:class:`PostgresStatements` adds to the commit statements
(:class:`~durable.store.commit_statements.CommitStatements`) a step's result,
a page of schedule firings and a batch of new runs. One object serves one
connection (its casts are that connection's); texts depend only on a plan's
shape, so each is prepared once per connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durable.engine.plan_steps import STEP_RESULT_IGNORED, StepResultPlan
from durable.engine.vocab import UNSETTLED, CheckpointStatus, RunStatus
from durable.models import Run
from durable.schedules.plan import FIRE_COLUMNS, SchedulePlan
from durable.store.commit_statements import CommitStatements
from durable.store.statements import (
    CP_FIELD,
    CP_TABLE,
    NOTIFY_CHANNEL,
    RUN_COLUMNS,
    RUN_TABLE,
    SCHEDULE_FIELD,
    SCHEDULE_TABLE,
    _in,
    column_params,
    q,
    run_columns,
)


class PostgresStatements(CommitStatements):
    """Every typed PostgreSQL statement: the commits (inherited), a step's result, schedules, new runs."""

    # -- a step result ----------------------------------------------------------------
    def finish_step(
        self,
        take: bool,
        claimed: bool = False,
        notify: bool = False,
        read: tuple[str, str] | None = None,
        read_first: str | None = None,
    ) -> str:
        """Settle an open step and wake (or, ``take``, lease) its suspended run, run row locked first.

        Nothing is settled for a missing run or one whose results are ignored;
        ``claimed``: nor unless the step still runs under the result's claim;
        ``notify``: a run woken is announced on :data:`NOTIFY_CHANNEL` (on commit).
        A suspended run that counts the steps it waits on (``awaiting_steps``)
        has it counted down by a settling result and is woken only at zero or
        by a failure; one that does not count them is woken by every result.
        The count is read from the row as locked (its latest version, whatever
        the statement's snapshot), so concurrent results count exactly.
        Params: :meth:`finish_step_params`. Returns one row: the run's status
        as found, whether this statement woke it, then the run's columns as
        leased (NULLs when not woken). ``read``: the CTEs and SELECT of a read
        that rides along (its params follow); then every row continues with
        whether the step was settled and one row of that read. ``read_first``:
        one of that read's CTEs (one row, a column ``s`` never NULL) evaluated
        before the run row is locked, for a read that takes no lock itself:
        the statement's snapshot is the same either way, so it reads the same
        rows, and the run row's lock, which this run's other results queue
        for, is not held while it reads.
        """
        wake = _wake_sets(take)
        claim = (
            f"AND {q('status')} = '{CheckpointStatus.RUNNING}' AND {q('locked_by')} = %s AND {q('attempts')} = %s "
            if claimed
            else ""
        )
        woken = f"(d.{q('awaiting_steps')} IS NULL OR d.{q('awaiting_steps')} <= 0 OR old.failure)"
        # An uncorrelated subquery in the locking read's condition is a one-time filter, run
        # before its scan and so before any row is locked (RECURSIVE allows the forward reference).
        gate = f"AND (SELECT s IS NOT NULL FROM {read_first}) " if read is not None and read_first else ""
        sql = (
            # RECURSIVE for the read's loose scan of its queue's backlog (a plain WITH otherwise).
            f"WITH {'RECURSIVE ' if read else ''}old AS (SELECT {q('id')}, {q('status')}, %s::boolean AS failure "
            f"FROM {RUN_TABLE} WHERE {q('id')} = %s {gate}FOR UPDATE), "
            f"cp AS (UPDATE {CP_TABLE} SET {q('status')} = %s, {q('output')} = {self.param(CP_FIELD['output'])}, "
            f"{q('error')} = {self.param(CP_FIELD['error'])}, {q('wake_at')} = NULL, {q('finished_at')} = %s, "
            f"{q('locked_by')} = NULL WHERE {q('run_id')} = %s AND {q('seq')} = %s "
            f"AND {q('status')} IN ({_in(UNSETTLED)}) {claim}"
            f"AND EXISTS (SELECT 1 FROM old WHERE {q('status')} NOT IN ({_in(STEP_RESULT_IGNORED)})) RETURNING 1), "
            f"n AS (SELECT count(*)::int AS settled FROM cp), "
            # A run that goes on waiting is written too (its count, one less). Its SET reads the row
            # as locked, so a result queued behind another's lock counts from that one's write.
            f"woke AS (UPDATE {RUN_TABLE} d SET {wake}, "
            f"{q('awaiting_steps')} = d.{q('awaiting_steps')} - n.settled FROM old, n "
            f"WHERE d.{q('id')} = old.{q('id')} AND old.{q('status')} = '{RunStatus.SUSPENDED}' "
            f"RETURNING {woken} AS woken, {run_columns('d')}), "
            f"up AS (SELECT {run_columns()} FROM woke WHERE woken) "
        )
        # (A volatile function: the join is never removed, and runs once, only for a woken run.)
        announce = (
            f" LEFT JOIN LATERAL (SELECT pg_notify('{NOTIFY_CHANNEL}', up.{q('namespace')}) "
            f"WHERE up.{q('id')} IS NOT NULL) announced ON true"
            if notify
            else ""
        )
        head = f"SELECT old.{q('status')}, up.{q('id')} IS NOT NULL, up.*"
        if read is None:
            return f"{sql}{head} FROM old LEFT JOIN up ON true{announce}"
        ctes, select = read
        return (
            f"{sql}, {ctes} {head}, EXISTS (SELECT 1 FROM cp), rd.* "
            f"FROM old LEFT JOIN up ON true{announce} LEFT JOIN ({select}) rd ON true"
        )

    def finish_step_params(self, result: StepResultPlan) -> list[Any]:
        sets = result.sets
        params: list[Any] = [
            sets["status"] != CheckpointStatus.COMPLETED,
            result.run_id,
            sets["status"],
            self.prep(CP_FIELD["output"], sets["output"]),
            self.prep(CP_FIELD["error"], sets["error"]),
            sets["finished_at"],
            result.run_id,
            result.seq,
            *((result.claim.owner, result.claim.attempt) if result.claim is not None else ()),
        ]
        if result.take is not None:
            owner, lease_until = result.take
            return [*params, owner, lease_until, result.now, result.now]
        return [*params, result.now]

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
            f"{', '.join(self.column(f) for f in RUN_COLUMNS)}) ON CONFLICT ({q('id')}) DO NOTHING RETURNING {q('id')}"
        )
        models = [Run(**row) for row in rows]
        params: list[Any] = []
        for f in RUN_COLUMNS:
            params += column_params([self.prep(f, getattr(m, f.attname)) for m in models])
        return sql, params


# A result wakes a suspended run that does not count its steps, or whose count this result
# ends, or at a failure (the run row's columns as locked: d; the result's: old and n).
_WAKES = f"(d.{q('awaiting_steps')} IS NULL OR d.{q('awaiting_steps')} <= n.settled OR old.failure)"


def _wake_sets(take: bool) -> str:
    """The run columns a step result writes when it wakes the run (as they were when it does not)."""
    if not take:
        return f"{q('wake_at')} = CASE WHEN {_WAKES} THEN %s ELSE d.{q('wake_at')} END"
    return ", ".join(
        f"{q(column)} = CASE WHEN {_WAKES} THEN {value} ELSE d.{q(column)} END"
        for column, value in (
            ("status", f"'{RunStatus.RUNNING}'"),
            ("locked_by", "%s"),
            ("locked_until", "%s"),
            ("updated_at", "%s"),
            ("turns", f"d.{q('turns')} + 1"),
            ("started_at", f"COALESCE(d.{q('started_at')}, %s)"),
        )
    )
