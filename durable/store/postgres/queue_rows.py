"""A limited queue's admission on PostgreSQL: one write after a step's result, else a read and a write.

The statements and why their reads may be trusted are in
:mod:`durable.store.queue_statements`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from durable.engine.plan_queues import (
    LEAVE_SLOT_MIN,
    LEAVE_SLOT_SHARE,
    Candidate,
    QueueAdmissionPlan,
    QueueAdmitted,
    QueueSeen,
    effective_limits,
)
from durable.engine.queue_tally import minute_of
from durable.engine.vocab import ACTIVE
from durable.models import Queue
from durable.store.portable.queue_rows import QueueRows
from durable.store.postgres.base import PostgresBase
from durable.store.queue_statements import (
    PG_ADMIT_GRANT,
    PG_ADMIT_PEEK,
    PG_ADMIT_PEEK_PARAMS,
    PG_ADMIT_READ,
    PG_ADMIT_READ_PARAMS,
    PG_COUNT_READ,
    PG_COUNT_READ_PARAMS,
)
from durable.store.statements import column_params

# The columns of a read's rows before its candidate's (see queue_statements.admit_read).
READ_HEAD = 8


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def read_params(plan: QueueAdmissionPlan, names: Sequence[str], **more: Any) -> list[Any]:
    """The parameters of an admission read for ``plan``, in the order ``names`` gives.

    The reads name the active run statuses in their text (:data:`~durable.engine.vocab.ACTIVE`).
    """
    if plan.run_statuses != ACTIVE:
        raise ValueError(f"admission reads count runs of the statuses {ACTIVE}, not {plan.run_statuses}")
    values = {"queue": plan.queue, "now": plan.now, "batch": plan.batch}
    values.update(leave_min=LEAVE_SLOT_MIN, leave_share=LEAVE_SLOT_SHARE)
    values.update(concurrency=plan.defaults.concurrency, **more)
    return [values[name] for name in names]


def to_seen(rows: Sequence[Sequence[Any]]) -> QueueSeen:
    """A :class:`QueueSeen` from the rows of an admission read (at least one)."""
    paused, overrides, rate_next_at, fresh, version, held, wanted, unstarted = rows[0][:READ_HEAD]
    candidates = tuple(
        Candidate(cp_id, run_id, seq, key, priority, enqueued_at, rank, served)
        for cp_id, run_id, seq, key, priority, enqueued_at, rank, served in (row[READ_HEAD:] for row in rows)
        if cp_id is not None
    )
    by_key = {key: n for key, n in _json(held)}
    overrides = _json(overrides) or {}
    return QueueSeen(version, paused, overrides, rate_next_at, by_key, wanted, candidates, bool(fresh), int(unstarted))


def counted(row: Sequence[Any]) -> QueueSeen:
    """A :class:`QueueSeen` from a busy queue's count read (:func:`~durable.store.queue_statements.count_read`).

    Enough for :meth:`QueueSeen.leaves_slot` only: no candidate, no room,
    never fresh (so never proof that nothing waits). A missing queue row
    reads as not paused, with no overrides and nothing counted.
    """
    paused, overrides, unstarted = row[:3]
    return QueueSeen("", bool(paused), _json(overrides) or {}, None, {}, 0, (), False, int(unstarted or 0))


class PostgresQueues(PostgresBase, QueueRows):
    """Admission of limited queues in the statements of :mod:`durable.store.queue_statements`."""

    def admit_steps(self, plan: QueueAdmissionPlan, seen: QueueSeen | None = None) -> QueueAdmitted:
        """The plan as the portable store executes it, in fewer statements.

        With ``seen`` (read by a step result's write), the grants chosen from
        it are one statement, compare-and-set on the queue row's version.
        Without, or when that row moved on, the admission reads without any lock (a statement that
        begins after the write that asked for it, so it sees that write's
        freed slot or waiting step) and grants the same way: two statements,
        and the queue row is locked only by the grant's. If the row moved on
        meanwhile (another admitter granted), or the read does not match the
        plan, a count of the steps granted and not started may show that
        results to come will admit (:meth:`_leaves`): nothing more is done.
        Otherwise, or when the read is paused, the admission runs under the lock: one statement
        locks the row (created if missing) and reads; when it says its
        snapshot missed a grant, or its room is not the plan's, the portable
        reads count again under the lock; the grants are a second.
        """
        if seen is not None:
            admitted = self._admit_seen(plan, seen)
            if admitted is not None:
                return admitted
        rows = self._execute(PG_ADMIT_PEEK, read_params(plan, PG_ADMIT_PEEK_PARAMS))
        seen = to_seen(rows) if rows else None
        admitted = self._admit_seen(plan, seen) if seen is not None else None
        if admitted is not None:
            return admitted
        if seen is not None and not seen.paused and self._leaves(plan):
            return QueueAdmitted(plan.queue)
        return self._admit_locked(plan)

    def _leaves(self, plan: QueueAdmissionPlan) -> bool:
        """May an admission whose grants were refused leave its slots? As a result may (``QueueSeen.leaves_slot``).

        Its grants were refused because another admitter granted since its
        read (or the read did not match the plan). While the leave threshold
        of the queue's slots is granted to steps no worker has started, each
        of those steps ends in a result that admits after it, so what this
        admission would grant is granted by them: one cheap count instead of
        reading again under the lock.
        """
        rows = self._execute(PG_COUNT_READ, read_params(plan, PG_COUNT_READ_PARAMS, run_id="", seq=-1))
        return bool(rows) and counted(rows[0]).leaves_slot(plan)

    def _admit_locked(self, plan: QueueAdmissionPlan) -> QueueAdmitted:
        """The admission under the queue row's lock (see :meth:`admit_steps`)."""
        with transaction.atomic():
            rows = self._read(plan)
            if not rows:
                Queue.objects.bulk_create([Queue(name=plan.queue, updated_at=plan.now)], ignore_conflicts=True)
                rows = self._read(plan)
            read = to_seen(rows)
            if read.paused:
                return QueueAdmitted(plan.queue, paused=True)
            limits = effective_limits(plan.defaults, read.overrides)
            by_key, held = dict(read.held_by_key), sum(read.held_by_key.values())
            wanted, candidates = plan.wanted(limits, held), list(read.candidates)
            if not rows[0][3] or wanted != read.wanted:
                held = self._holders(plan).count()
                wanted = plan.wanted(limits, held)
                candidates = self._candidates(plan, wanted) if wanted else []
                keys = {c.key for c in candidates}
                by_key = self._held_by_key(plan, keys) if limits.key_concurrency is not None else {}
            grants, next_at = plan.choose(limits, held, by_key, candidates, read.rate_next_at)
            if not grants:
                return QueueAdmitted(plan.queue)
            _, written = self._grant_steps(plan, grants, next_at, None)
        return QueueAdmitted(plan.queue, written)

    def _admit_seen(self, plan: QueueAdmissionPlan, seen: QueueSeen) -> QueueAdmitted | None:
        """Grants chosen from ``seen``, written if the queue row is still at its version; None if not."""
        if seen.paused:
            return None  # let the locked read say so (it may have been resumed)
        limits = effective_limits(plan.defaults, seen.overrides)
        held = sum(seen.held_by_key.values())
        if plan.wanted(limits, held) != seen.wanted:
            return None
        grants, next_at = plan.choose(limits, held, seen.held_by_key, seen.candidates, seen.rate_next_at)
        if not grants:
            return QueueAdmitted(plan.queue)
        matched, written = self._grant_steps(plan, grants, next_at, seen.version)
        return QueueAdmitted(plan.queue, written) if matched else None

    def _read(self, plan: QueueAdmissionPlan) -> list[tuple[Any, ...]]:
        return self._execute(PG_ADMIT_READ, read_params(plan, PG_ADMIT_READ_PARAMS))

    def _grant_steps(self, plan: QueueAdmissionPlan, grants: Sequence[Any], next_at: Any, version: str | None) -> Any:
        """Write ``grants`` (and the row's rate_next_at); whether the row was at ``version``, the grants written."""
        ids = [g.id for g in grants]
        params = [plan.queue, version, version, ids]
        params += column_params([g.start for g in grants]) + column_params([g.until for g in grants])
        matched, written = self._execute(PG_ADMIT_GRANT, [*params, minute_of(plan.now), next_at, plan.queue])[0]
        return matched, tuple(g for g in grants if g.id in set(written))
