"""A turn's history and its atomic commit (checkpoints, waiters, settle), in memory."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from durable.engine.ports import REFUSED, CheckpointRecord, CommitResult, Outcome, TurnWrites, Waiter
from durable.engine.vocab import EVENT_TOKEN, RUN_TOKEN, SETTLED, TERMINAL, WAIT_KINDS, RunStatus
from durable.store.memory.base import MemoryBase, locked, matches
from durable.store.memory.tables import (
    CHECKPOINT_JSON,
    IntegrityError,
    Row,
    as_json,
    checkpoint_record,
    new_checkpoint,
)

logger = logging.getLogger("durable.store")

# Columns a checkpoint update may change (identity and dispatch columns stay as inserted).
_UPDATABLE = [
    name
    for name in CheckpointRecord.__dataclass_fields__
    if name not in ("seq", "name", "kind", "queue", "enqueued_at", "input")
]


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

        Nothing at all is written unless ``owner`` holds the lease, and every
        claimed step it settles is still claimed by it. Settling releases the
        lease in the same write. Waiters re-check, inside the commit, whether
        what they wait for already happened (a buffered signal or event, a
        settled run or step): then the run is due at once. Runs waiting on
        this one are woken in the commit too and reported in the result.
        """
        try:
            with self.atomic():
                return self._commit(run_id, owner, now, lease_until, writes, outcome)
        except _Refused:
            return REFUSED

    def _commit(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        writes: TurnWrites,
        outcome: Outcome | None,
    ) -> CommitResult:
        row = self._held(run_id, owner)
        if row is None:
            return REFUSED
        if outcome is not None and outcome.next_run is not None:
            self._insert_runs([outcome.next_run])
        self.tables.set(row, **{name: as_json(value) for name, value in writes.run_fields.items()})
        if outcome is None:
            self.tables.set(row, locked_until=lease_until, updated_at=now)
        else:
            self._settle_run(row, now, outcome)
        cancelled = self._apply(run_id, writes, now)
        if outcome is None:
            return CommitResult(written=True)
        poked = self._settle_waiters(run_id, writes, outcome, now)
        tokens = [RUN_TOKEN + rid for rid in cancelled]
        if outcome.status in TERMINAL:
            tokens += outcome.notify
        woken = tuple(self._wake_waiters(tokens, now)) if tokens else ()
        if outcome.status != RunStatus.SUSPENDED:
            return CommitResult(written=True, woken=woken)
        return CommitResult(written=True, woken=woken, wake_at=now if poked else row["wake_at"])

    def _settle_run(self, row: Row, now: datetime, outcome: Outcome) -> None:
        """The run's columns for ``outcome``; the lease is released in the same write."""
        self._release(row, now, outcome.status)
        if outcome.status == RunStatus.SUSPENDED:
            # A cancel-with-undo that arrived during the turn must not wait for the timer.
            cancel_now = row["cancel_requested"] and not outcome.cancel_seen
            self.tables.set(row, wake_at=now if cancel_now else outcome.wake_at)
        elif outcome.status == RunStatus.BLOCKED:
            self.tables.set(row, wake_at=None, error=as_json(outcome.error))
        else:
            self.tables.set(
                row, wake_at=None, finished_at=now, output=as_json(outcome.output), error=as_json(outcome.error)
            )
            if outcome.next_run is not None:
                self.tables.set(row, continued_to=outcome.next_run["id"])
            if outcome.lifecycle is not None:
                self.tables.set(row, lifecycle=as_json(outcome.lifecycle), lifecycle_owed=True)

    def _apply(self, run_id: str, writes: TurnWrites, now: datetime) -> list[str]:
        """Apply checkpoint writes, new children and sibling cancellations; return cancelled ids."""
        if writes.new_runs:
            self._insert_runs(writes.new_runs)
        history = self.tables.history(run_id)
        for write in writes.checkpoints:
            rec = write.record
            if write.create:
                if rec.seq in history:
                    raise IntegrityError(f"run {run_id!r} already has a checkpoint at position {rec.seq}")
                self.tables.put(history, rec.seq, new_checkpoint(run_id, rec, self.tables.next_id()))
                continue
            cp = history.get(rec.seq)
            if write.claimed_by is not None and (
                cp is None or cp["status"] not in write.expect or cp["locked_by"] != write.claimed_by
            ):
                raise _Refused()  # the claim was taken from us: the turn cannot stand
            if cp is not None and cp["status"] in write.expect:
                self.tables.set(cp, **self._update_of(rec))
        for signal_id in writes.consumed_signals:
            signal = self.tables.signals.get(signal_id)
            if signal is not None and signal["run_id"] == run_id:
                self.tables.drop(self.tables.signals, signal_id)
        return self._cancel_tree(writes.cancel_runs, now) if writes.cancel_runs else []

    @staticmethod
    def _update_of(rec: CheckpointRecord) -> dict[str, Any]:
        """The columns a checkpoint update writes (an unset start or attempt count keeps the stored one)."""
        changes = {}
        for name in _UPDATABLE:
            value = getattr(rec, name)
            if name in ("started_at", "attempts") and not value:
                continue
            changes[name] = as_json(value) if name in CHECKPOINT_JSON else value
        return changes

    def _settle_waiters(self, run_id: str, writes: TurnWrites, outcome: Outcome, now: datetime) -> bool:
        """Replace the run's waiters; True when the suspended run was made due at once (``now``)."""
        waiters = outcome.waiters
        waited = writes.consumed_signals or any(w.record.kind in WAIT_KINDS for w in writes.checkpoints)
        if waiters or waited or outcome.had_waiters:
            self._delete_waiters([run_id])
        taken: set[int] = set()
        for w in waiters:
            if w.seq in taken:
                raise IntegrityError(f"run {run_id!r} waits twice at position {w.seq}")
            taken.add(w.seq)
            waiter_id = self.tables.next_id()
            row = {"id": waiter_id, "run_id": run_id, "name": w.token, "seq": w.seq, "match": as_json(w.match)}
            self.tables.put(self.tables.waiters, waiter_id, {**row, "created_at": now})
        if outcome.status != RunStatus.SUSPENDED:
            return False
        history = self.tables.history(run_id)
        watched = [w.seq for w in waiters] + outcome.step_seqs
        settled = any(seq in history and history[seq]["status"] in SETTLED for seq in watched)
        # Always asked when there are waiters: it also marks the awaited runs.
        there = bool(waiters) and self._already_there(run_id, waiters)
        return bool((settled or there) and self._wake([run_id], now))

    def _already_there(self, run_id: str, waiters: list[Waiter]) -> bool:
        """Did what these waiters wait for happen before they were registered? Marks awaited runs first."""
        awaited = [self.tables.runs.get(w.token[len(RUN_TOKEN) :]) for w in waiters if w.token.startswith(RUN_TOKEN)]
        done = False
        for row in awaited:
            if row is not None:
                self.tables.set(row, awaited=True)
                done = done or row["status"] in TERMINAL
        signals = {w.token for w in waiters if not w.token.startswith((RUN_TOKEN, EVENT_TOKEN))}
        if done or any(s["run_id"] == run_id and s["name"] in signals for s in self.tables.signals.values()):
            return True
        for w in waiters:
            if w.token.startswith(EVENT_TOKEN):
                name = w.token[len(EVENT_TOKEN) :]
                buffered = [
                    e for e in self.tables.ordered(self.tables.events) if e["name"] == name and not e["consumed"]
                ]
                if any(matches(w.match, e["payload"]) for e in buffered[:500]):
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
                logger.warning("commit of run %s failed", run_id, exc_info=True)
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
