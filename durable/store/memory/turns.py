"""A turn's history and its atomic commit (checkpoints, waiters, settle), in memory."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from durable.engine import logs
from durable.engine.plan import CommitPlan, RunChange, plan_commit, waiter_events, waiter_runs, waiter_signals
from durable.engine.ports import REFUSED, CheckpointRecord, CommitResult, HistoryDelta, Outcome, TurnWrites, Waiter
from durable.engine.vocab import RUN_TOKEN, SETTLED, TERMINAL
from durable.store.memory.base import MemoryBase, locked, matches
from durable.store.memory.tables import (
    CHECKPOINT_JSON,
    RUN_JSON,
    IntegrityError,
    Row,
    as_json,
    checkpoint_record,
    new_checkpoint,
)

logger = logging.getLogger("durable.store")


class _Refused(Exception):
    """Undoes a commit whose step claim was taken away (as a lost lease, nothing stays)."""


class TurnsPart(MemoryBase):
    @locked
    def load_checkpoints(self, run_id: str) -> dict[int, CheckpointRecord]:
        history = self.tables.checkpoints.get(run_id, {})
        return {seq: checkpoint_record(history[seq]) for seq in sorted(history)}

    @locked
    def load_histories(self, run_ids: list[str]) -> dict[str, dict[int, CheckpointRecord]]:
        """The checkpoints of several runs, by run id (a run without any is absent)."""
        found = {run_id: self.load_checkpoints(run_id) for run_id in dict.fromkeys(run_ids)}
        return {run_id: history for run_id, history in found.items() if history}

    @locked
    def load_delta(self, run_id: str, seqs: list[int], after: int) -> HistoryDelta:
        """The run's checkpoints at ``seqs`` or past ``after``, and its count of checkpoints."""
        history = self.tables.checkpoints.get(run_id, {})
        wanted = set(seqs)
        found = {seq: checkpoint_record(history[seq]) for seq in sorted(history) if seq in wanted or seq > after}
        return HistoryDelta(found, len(history))

    def commit(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        writes: TurnWrites,
        outcome: Outcome | None = None,
    ) -> CommitResult:
        """Write a turn's checkpoints (and, with ``outcome``, settle the run) atomically.

        What is written is :func:`durable.engine.plan.plan_commit`'s plan, as
        the database stores write it: nothing at all unless ``owner`` holds
        the lease and every claimed step it settles is still claimed by it;
        settling releases the lease in the same write. Waiters re-check,
        inside the commit, whether what they wait for already happened (a
        buffered signal or event, a settled run or step): then the run is due
        at once. Runs waiting on this one are woken in the commit and reported.
        A singleton run's terminal outcome hands its slot over in the same block.
        """
        plan = plan_commit(run_id, owner, now, lease_until, writes, outcome)
        if outcome is None or outcome.slot is None:
            return self.execute_commit(plan)
        with self.atomic():
            result = self.execute_commit(plan)
            if not result.written:
                return result
            admitted = self.hand_over(*outcome.slot, now)
        return replace(result, woken=result.woken + tuple(admitted))

    def execute_commit(self, plan: CommitPlan) -> CommitResult:
        """Execute a commit plan as one atomic block; see :meth:`commit`."""
        try:
            with self.atomic():
                row = self._held(plan.run.lease.run_id, plan.run.lease.owner)
                if row is None:
                    return REFUSED
                self._write_run(row, plan.run)
                cancelled = self._apply(plan)
                poked = self._settle_waiters(plan)
                return self._committed(plan, row, cancelled, plan.now if poked else row["wake_at"])
        except _Refused:
            return REFUSED

    def _write_run(self, row: Row, change: RunChange) -> None:
        """The run's columns (the lease was checked; holding the store's lock is the row lock)."""
        self.tables.set(row, **{name: as_json(v) if name in RUN_JSON else v for name, v in change.sets.items()})
        if change.cancel_wake is not None:
            cancel = change.cancel_wake
            self.tables.set(row, wake_at=cancel.now if row["cancel_requested"] else cancel.wake_at)

    def _committed(self, plan: CommitPlan, row: Row, cancelled: list[str], wake_at: datetime | None) -> CommitResult:
        """The waiters this commit wakes, and the result the turn reads."""
        if not plan.final:
            return CommitResult(written=True)
        after = plan.after
        tokens = [RUN_TOKEN + rid for rid in cancelled] if after.wake_cancelled else []
        if after.wake_tokens and (row["awaited"] or not after.only_if_awaited):
            tokens += after.wake_tokens
        woken = tuple(self._wake_waiters(tokens, plan.now)) if tokens else ()
        return CommitResult(
            written=True, woken=woken, wake_at=wake_at if plan.suspends else None, cancelled=tuple(cancelled)
        )

    def _apply(self, plan: CommitPlan) -> list[str]:
        """Everything of the plan beyond the run row; returns the runs cancelled."""
        run_id = plan.run.lease.run_id
        if plan.new_runs:
            self._insert_runs(list(plan.new_runs))
        history = self.tables.history(run_id)
        for rec in plan.inserts:
            if rec.seq in history:
                raise IntegrityError(f"run {run_id!r} already has a checkpoint at position {rec.seq}")
            self.tables.put(history, rec.seq, new_checkpoint(run_id, rec, self.tables.next_id()))
        for change in plan.updates:
            cp = history.get(change.seq)
            if cp is None or cp["status"] not in change.expect:
                if change.claimed_by is not None:
                    raise _Refused()  # the claim was taken from us: the turn cannot stand
                continue
            if change.claimed_by is not None and cp["locked_by"] != change.claimed_by:
                raise _Refused()
            self.tables.set(cp, **{k: as_json(v) if k in CHECKPOINT_JSON else v for k, v in change.written().items()})
        for signal_id in plan.consumed_signals:
            signal = self.tables.signals.get(signal_id)
            if signal is not None and signal["run_id"] == run_id:
                self.tables.drop(self.tables.signals, signal_id)
        return self._cancel_tree(list(plan.cancel_runs), plan.now) if plan.cancel_runs else []

    def _settle_waiters(self, plan: CommitPlan) -> bool:
        """Replace the run's waiters; True when the suspended run was made due at once (``now``)."""
        run_id, change = plan.run.lease.run_id, plan.waiters
        if change is not None and change.clear:
            self._delete_waiters([run_id])
        taken: set[int] = set()
        for w in change.add if change is not None else ():
            if w.seq in taken:
                raise IntegrityError(f"run {run_id!r} waits twice at position {w.seq}")
            taken.add(w.seq)
            waiter_id = self.tables.next_id()
            row = {"id": waiter_id, "run_id": run_id, "name": w.token, "seq": w.seq, "match": as_json(w.match)}
            self.tables.put(self.tables.waiters, waiter_id, {**row, "created_at": plan.now})
        if not plan.suspends:
            return False
        history = self.tables.history(run_id)
        settled = any(seq in history and history[seq]["status"] in SETTLED for seq in plan.recheck)
        # Always asked when there are waiters: it also marks the awaited runs.
        there = change is not None and change.recheck_waiters and self._already_there(run_id, change.add)
        return bool((settled or there) and self._wake([run_id], plan.now))

    def _already_there(self, run_id: str, waiters: Sequence[Waiter]) -> bool:
        """Did what these waiters wait for happen before they were registered? Marks awaited runs first."""
        done = False
        for awaited in waiter_runs(waiters):
            row = self.tables.runs.get(awaited)
            if row is not None:
                self.tables.set(row, awaited=True)
                done = done or row["status"] in TERMINAL
        signals = set(waiter_signals(waiters))
        if done or any(s["run_id"] == run_id and s["name"] in signals for s in self.tables.signals.values()):
            return True
        for name, match in waiter_events(waiters):
            buffered = [e for e in self.tables.ordered(self.tables.events) if e["name"] == name and not e["consumed"]]
            if any(matches(match, e["payload"]) for e in buffered[:500]):
                return True
        return False

    def commit_many(
        self, commits: list[tuple[str, str, datetime, datetime, TurnWrites, Outcome]]
    ) -> list[CommitResult | Exception]:
        """Final commits of several turns, each as :meth:`commit` makes it and on its own lease.

        Each result is :meth:`commit`'s, or the exception that run's own
        commit raised (that commit wrote nothing); it does not raise itself.
        """
        results: list[CommitResult | Exception] = []
        for run_id, owner, now, lease_until, writes, outcome in commits:
            try:
                results.append(self.commit(run_id, owner, now, lease_until, writes, outcome))
            except Exception as exc:  # reported for this run alone
                logger.warning("commit of run %s failed", run_id, exc_info=True, extra=logs.fields(run_id))
                results.append(exc)
        return results

    @locked
    def next_signal(self, run_id: str, name: str, skip: list[int]) -> tuple[int, Any] | None:
        """The oldest buffered signal ``name`` of the run not in ``skip`` (a read: nothing is consumed)."""
        skipped = set(skip)
        for row in self.tables.ordered(self.tables.signals):
            if row["run_id"] == run_id and row["name"] == name and row["id"] not in skipped:
                return row["id"], as_json(row["payload"])
        return None
