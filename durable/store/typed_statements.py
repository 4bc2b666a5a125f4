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
    q,
    run_columns,
)


class PostgresStatements(CommitStatements):
    """Every typed PostgreSQL statement: the commits (inherited), a step's result, schedules, new runs."""

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
            # RECURSIVE for the read's loose scan of its queue's backlog (a plain WITH otherwise).
            f"WITH {'RECURSIVE ' if read else ''}old AS (SELECT {q('id')}, {q('status')} FROM {RUN_TABLE} "
            f"WHERE {q('id')} = %s FOR UPDATE), "
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
