"""A step's claim and its result, each as one statement."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import connection

from durable.engine.plan_queues import AdmissionRead
from durable.engine.plan_steps import StepClaimPlan, StepResultPlan, plan_step_result
from durable.engine.ports import ClaimCheck, RunRecord, StepClaim
from durable.store.portable.step_rows import StepRows
from durable.store.postgres.base import PostgresBase
from durable.store.postgres.queue_rows import counted, read_params, to_seen
from durable.store.postgres.rows import to_run
from durable.store.queue_statements import (
    RESULT_COUNT_CTES,
    RESULT_COUNT_FIRST,
    RESULT_COUNT_PARAMS,
    RESULT_COUNT_SELECT,
    RESULT_READ_CTES,
    RESULT_READ_PARAMS,
    RESULT_READ_SELECT,
)
from durable.store.statements import CP_FIELD, PG_CLAIM_STEP, PG_SET_STEP_TIMEOUT, RUN_COLUMNS, RUN_FIELD, statuses

# The read a step result carries: the full one, or a busy queue's count alone (AdmissionRead.count_only),
# with the CTE read before the run row is locked: the count, which locks nothing; the full read
# takes the queue row FOR SHARE, which must come after the run row (the order every commit takes).
_READS = {
    False: (RESULT_READ_CTES, RESULT_READ_SELECT, RESULT_READ_PARAMS, None),
    True: (RESULT_COUNT_CTES, RESULT_COUNT_SELECT, RESULT_COUNT_PARAMS, RESULT_COUNT_FIRST),
}


class PostgresSteps(PostgresBase, StepRows):
    def _claim_step(self, plan: StepClaimPlan, timeout_of: Callable[[str], float | None]) -> StepClaim | None:
        """One UPDATE that locks the checkpoint row only; the run row is read, not locked.

        (The run row is locked first everywhere else; a cancel racing the
        claim is settled by the result write, which drops results for
        cancelled runs.) A step with a timeout takes a second statement.
        """
        params = [plan.owner, plan.lease_until, plan.now, plan.run_id, plan.seq, plan.now, statuses(plan.run_statuses)]
        params += [plan.now, plan.now]
        rows = self._execute(PG_CLAIM_STEP, params)
        if not rows:
            return None
        cp_id, name, raw_input, attempts, namespace, queue, ready_at, workflow, raw_trace = rows[0]
        field: Any = CP_FIELD["input"]
        value = field.from_db_value(raw_input, None, connection) if raw_input is not None else None
        trace_field: Any = RUN_FIELD["trace_context"]
        trace = trace_field.from_db_value(raw_trace, None, connection) if raw_trace is not None else None
        timeout_at = plan.timeout_at(timeout_of(name))
        if timeout_at is not None:
            self._execute(PG_SET_STEP_TIMEOUT, [timeout_at, cp_id])
        return StepClaim(plan.run_id, plan.seq, name, value, attempts, namespace, queue, ready_at, workflow, trace)

    def _settle_step(self, plan: StepResultPlan, read: AdmissionRead | None = None) -> tuple[bool, RunRecord | None]:
        """Settle and wake (or lease) in one statement; whether the run was woken, the run as leased.

        With ``read``, the same statement reads the step's queue for its next
        admission (``read.seen``, when the step was settled by it).
        """
        take = plan.take is not None
        params = self._statements.finish_step_params(plan)
        ride, first = None, None
        if read is not None:
            ctes, select, names, first = _READS[read.count_only]
            ride = (ctes, select)
            params += read_params(read.plan, names, run_id=plan.run_id, seq=plan.seq)
        # A woken run (not one this process takes) is announced to the listening workers.
        notify = not take and self._notifying()
        rows = self._execute(self._statements.finish_step(take, plan.claim is not None, notify, ride, first), params)
        if not rows:
            return False, None
        _, woken, *run = rows[0]
        if read is not None:
            width = len(RUN_COLUMNS)
            if run[width]:  # settled by this statement: its slot is free in what the read counted
                found = [row[width + 3 :] for row in rows]
                read.seen = counted(found[0]) if read.count_only else to_seen(found)
            run = run[:width]
        if plan.take is None or not woken:
            return bool(woken), None
        return True, to_run(run)

    def finish_step(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
        retry_at: datetime | None = None,
        claim: ClaimCheck | None = None,
        admission: AdmissionRead | None = None,
    ) -> bool:
        """As the portable store's; with ``admission``, the result's statement also reads the queue."""
        plan = plan_step_result(run_id, seq, now, output=output, error=error, retry_at=retry_at, claim=claim)
        if admission is None or plan.retry or (plan.claim is not None and plan.claim.lapsed_at is not None):
            return self._finish_step(plan)
        return self._settle_step(plan, admission)[0]

    def _finish_step(self, plan: StepResultPlan) -> bool:
        if plan.retry or (plan.claim is not None and plan.claim.lapsed_at is not None):
            return super()._finish_step(plan)
        return self._settle_step(plan)[0]

    def finish_step_and_acquire(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        owner: str,
        lease_until: datetime,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
        claim: ClaimCheck | None = None,
        admission: AdmissionRead | None = None,
    ) -> RunRecord | None:
        """Settle the step and take the woken run's lease, in the one statement (no wake write, no acquire).

        With ``admission``, that statement also reads the step's queue (see :meth:`finish_step`).
        """
        plan = plan_step_result(run_id, seq, now, output=output, error=error, take=(owner, lease_until), claim=claim)
        return self._settle_step(plan, admission)[1]
