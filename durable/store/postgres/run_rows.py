"""Leases, histories and page claims of runs, each as one (prepared) statement."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from durable.engine.ports import CheckpointRecord, HistoryDelta, RunRecord
from durable.engine.vocab import RunStatus
from durable.store.claim_statements import (
    PG_CLAIM_DUE_PAGE,
    PG_CLAIM_DUE_PAGE_SCOPED,
    PG_CLAIM_PENDING_PAGE,
    PG_CLAIM_PENDING_PAGE_SCOPED,
    claim_page_params,
)
from durable.store.portable.due_work import DueWork
from durable.store.portable.histories import HistoryRows
from durable.store.portable.run_reads import RunReads
from durable.store.portable.run_rows import RunRows
from durable.store.postgres.base import PostgresBase
from durable.store.postgres.rows import to_checkpoint, to_run
from durable.store.statements import (
    PG_ACQUIRE,
    PG_LEASE_HELD,
    PG_LOAD_CHECKPOINTS,
    PG_LOAD_DELTA,
    PG_LOAD_HISTORIES,
)


class PostgresRuns(PostgresBase, RunRows, RunReads, HistoryRows, DueWork):
    def acquire(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        rows = self._execute(PG_ACQUIRE, [owner, lease_until, now, now, run_id, now])
        return to_run(rows[0]) if rows else None

    def lease_held(self, run_id: str, owner: str) -> bool:
        return bool(self._execute(PG_LEASE_HELD, [run_id, RunStatus.RUNNING, owner]))

    # Histories are read raw: one JSON decode per row, timestamps parsed by the driver (to_checkpoint).
    def load_checkpoints(self, run_id: str) -> dict[int, CheckpointRecord]:
        return {row[0]: to_checkpoint(row) for row in self._cursors.history(PG_LOAD_CHECKPOINTS, [run_id])}

    def load_histories(self, run_ids: list[str]) -> dict[str, dict[int, CheckpointRecord]]:
        histories: dict[str, dict[int, CheckpointRecord]] = {}
        for run_id, *row in self._cursors.history(PG_LOAD_HISTORIES, [run_ids]):
            histories.setdefault(run_id, {})[row[0]] = to_checkpoint(row)
        return histories

    def load_delta(self, run_id: str, seqs: list[int], after: int) -> HistoryDelta:
        """The checkpoints at ``seqs`` or past ``after`` and the run's count of them, in one statement."""
        rows = self._cursors.history(PG_LOAD_DELTA, [run_id, run_id, seqs, after])
        found = {row[1]: to_checkpoint(row[1:]) for row in rows if row[1] is not None}
        return HistoryDelta(found, rows[0][0])

    def _claim_page(
        self, owner: str, now: datetime, lease_until: datetime, limit: int, *, pending: bool, scope: list[str] | None
    ) -> list[RunRecord]:
        """The page chosen ``FOR UPDATE SKIP LOCKED``: concurrent claimers take disjoint runs without waiting.

        A scoped worker's page (``scope``) is chosen among its namespaces' runs, one array parameter.
        """
        due: list[Any] = [RunStatus.PENDING] if pending else [RunStatus.SUSPENDED, now]
        if scope is None:
            sql, among = (PG_CLAIM_PENDING_PAGE if pending else PG_CLAIM_DUE_PAGE), []
        else:
            sql, among = (PG_CLAIM_PENDING_PAGE_SCOPED if pending else PG_CLAIM_DUE_PAGE_SCOPED), [scope]
        params = claim_page_params(due, limit, owner, now, lease_until, among)
        return [to_run(row) for row in self._cursors.execute_unprepared(sql, params)]

    def _claiming(self) -> AbstractContextManager[None]:
        """The page claims of one call, in one transaction planned on their indexes (see ``Cursors.by_index``)."""
        return self._cursors.by_index()
