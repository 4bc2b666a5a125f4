"""A turn's commit as one statement, and a page's final commits as one statement per shape.

Plans of shape ``BATCH`` or ``STATEMENT`` (:mod:`durable.engine.plan`) run as
the single statements of :class:`durable.store.typed_statements.PostgresStatements`;
``TRANSACTION`` plans run as the portable store runs them. Outside a
transaction one statement is one round trip and one commit instead of BEGIN,
several statements and COMMIT; inside one (``ctx.transaction``, a test) it
simply joins it. The lease compare-and-set is the statement's first CTE and
every other part reads its output, so a lost lease writes nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime

from durable.engine.plan import CommitPlan, Shape, plan_page
from durable.engine.ports import REFUSED, CommitResult
from durable.engine.vocab import RunStatus
from durable.store.portable.commits import CommitRows
from durable.store.postgres.base import PostgresBase
from durable.store.statements import PG_POKE_IF_SETTLED

logger = logging.getLogger("durable.store")


class PostgresCommits(PostgresBase, CommitRows):
    def execute_commit(self, plan: CommitPlan) -> CommitResult:
        if plan.shape == Shape.TRANSACTION:
            return super().execute_commit(plan)
        sql, params = self._statements.commit(plan)
        found = self._execute(sql, params)
        if not found:
            return REFUSED
        wake_at, awaited = found[0]
        return self._after_statement(plan, wake_at, bool(awaited))

    def _after_statement(self, plan: CommitPlan, wake_at: datetime | None, awaited: bool) -> CommitResult:
        """After a one-statement commit: a suspension re-checks its steps, a finished run wakes its waiters.

        The re-check runs after the suspending statement: a result that
        committed before it found the run still running and left the wake to
        us; one that commits after it wakes the run itself.
        """
        run_id, now = plan.run.lease.run_id, plan.now
        if plan.suspends and plan.recheck:
            if self._execute(PG_POKE_IF_SETTLED, [now, run_id, RunStatus.SUSPENDED, run_id, list(plan.recheck)]):
                wake_at = now
        return self._committed(plan, [], wake_at, awaited)

    def _commit_shared(self, plans: list[CommitPlan]) -> dict[int, CommitResult | Exception]:
        """One statement per group of :func:`durable.engine.plan.plan_page` (two runs or more).

        A shared statement that fails wrote nothing (it is one statement): its
        runs are left out of the results, to be committed one by one.
        """
        results: dict[int, CommitResult | Exception] = {}
        for batch in plan_page(plans).batches:
            try:
                written = self._shared_statement([plans[i] for i in batch])
            except Exception:
                logger.warning(
                    "shared commit of %d turns failed; committing them one by one", len(batch), exc_info=True
                )
                continue
            for i in batch:
                got = written.get(plans[i].run.lease.run_id)
                try:
                    results[i] = REFUSED if got is None else self._after_statement(plans[i], *got)
                except Exception as exc:  # noqa: BLE001 - written; only the wake of waiters failed
                    results[i] = exc
        return results

    def _shared_statement(self, plans: list[CommitPlan]) -> dict[str, tuple[datetime | None, bool]]:
        """Run one shared commit; ``{run_id: (wake_at as written, awaited)}`` for the runs written."""
        sql, params = self._statements.commit_many(plans)
        return {run_id: (wake, bool(awaited)) for run_id, wake, awaited in self._execute(sql, params)}
