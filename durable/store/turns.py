"""A turn's history and its atomic commit (checkpoints, waiters, settle)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, DateTimeField, Value, When

from durable.engine.context_base import EVENT_TOKEN, RUN_TOKEN, WAIT_KINDS
from durable.engine.ports import (
    REFUSED,
    CheckpointRecord,
    CommitResult,
    Outcome,
    TurnWrites,
    Waiter,
)
from durable.models import (
    TERMINAL,
    BufferedEvent,
    BufferedSignal,
    Checkpoint,
    Run,
    RunStatus,
    SignalWaiter,
)
from durable.store import _pg
from durable.store._base import (
    _CP_FIELDS,
    CP_STATUS,
    StoreBase,
    _cp_record,
    _LeaseGone,
    _matches,
)

logger = logging.getLogger("durable.store")


class TurnsStore(StoreBase):
    def load_checkpoints(self, run_id: str) -> dict[int, CheckpointRecord]:
        if _pg.usable():
            return _pg.load_checkpoints(run_id)
        rows = Checkpoint.objects.filter(run_id=run_id).order_by("seq").values(*_CP_FIELDS)
        return {row["seq"]: _cp_record(row) for row in rows}

    def load_histories(self, run_ids: list[str]) -> dict[str, dict[int, CheckpointRecord]]:
        """The checkpoints of several runs in one query, by run id (a run without any is absent)."""
        if _pg.usable():
            return _pg.load_histories(run_ids)
        histories: dict[str, dict[int, CheckpointRecord]] = {}
        rows = Checkpoint.objects.filter(run_id__in=run_ids).order_by("run_id", "seq").values("run_id", *_CP_FIELDS)
        for row in rows:
            histories.setdefault(row["run_id"], {})[row["seq"]] = _cp_record(row)
        return histories

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

        The compare-and-set on the lease decides everything: when it matches
        nothing the turn has lost the run and nothing at all is written.
        Settling releases the lease in that same statement. A continue-as-new
        successor is inserted in this transaction too, before the current run
        completes.

        Waiters registered by a suspension re-check what they wait for inside
        this transaction, after taking the lock the sender also takes (the run
        row for signals, the awaited run's row for runs, an advisory lock per
        name for events), so a concurrent signal, result or event is never
        lost between the turn's read and its registration. Runs waiting on
        this one are woken after commit (``CommitResult.woken``).
        """
        if _pg.usable() and self._simple(writes, outcome):
            return self._commit_simple(run_id, owner, now, lease_until, writes, outcome)
        waiters = outcome.waiters if outcome is not None else []
        event_names = sorted({w.token[len(EVENT_TOKEN) :] for w in waiters if w.token.startswith(EVENT_TOKEN)})
        try:
            with transaction.atomic():
                for name in event_names:
                    self._lock_event(name)
                if outcome is not None and outcome.next_run is not None:
                    self._insert_runs([outcome.next_run])
                fields: dict[str, Any] = dict(writes.run_fields)
                if outcome is None:
                    fields.update(locked_until=lease_until, updated_at=now)
                else:
                    fields.update(status=outcome.status, updated_at=now, locked_by=None, locked_until=None)
                    if outcome.status == RunStatus.SUSPENDED and outcome.cancel_seen:
                        fields["wake_at"] = outcome.wake_at
                    elif outcome.status == RunStatus.SUSPENDED:
                        # A cancel-with-undo that arrived during the turn must not wait for the timer.
                        fields["wake_at"] = Case(
                            When(cancel_requested=True, then=Value(now)),
                            default=Value(outcome.wake_at),
                            output_field=DateTimeField(),
                        )
                    elif outcome.status == RunStatus.BLOCKED:
                        fields.update(wake_at=None, error=outcome.error)
                    else:
                        fields.update(wake_at=None, finished_at=now, output=outcome.output, error=outcome.error)
                        if outcome.next_run is not None:
                            fields["continued_to"] = outcome.next_run["id"]
                        if outcome.lifecycle is not None:
                            # Whom the lifecycle event is owed to, in the same write as the status.
                            fields.update(lifecycle=outcome.lifecycle, lifecycle_owed=True)
                if not Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(**fields):
                    raise _LeaseGone()
                cancelled = self._apply(run_id, writes, now)
                poked = outcome is not None and self._settle_waiters(run_id, writes, outcome, now)
        except _LeaseGone:
            return REFUSED
        if outcome is None:
            return CommitResult(written=True)
        tokens = [RUN_TOKEN + rid for rid in cancelled]
        if outcome.status in TERMINAL:
            tokens += outcome.notify
        woken = tuple(self._wake_waiters(tokens, now)) if tokens else ()
        wake_at = (now if poked else outcome.wake_at) if outcome.status == RunStatus.SUSPENDED else None
        return CommitResult(written=True, woken=woken, wake_at=wake_at)

    @staticmethod
    def _simple(writes: TurnWrites, outcome: Outcome | None) -> bool:
        """The common shapes (steps, timers, a plain end) that one statement can commit."""
        if writes.new_runs or writes.consumed_signals or writes.cancel_runs:
            return False
        if any(w.record.kind in WAIT_KINDS for w in writes.checkpoints):
            return False  # its waiter rows go too
        if outcome is None:
            return True
        if outcome.status not in (RunStatus.SUSPENDED, RunStatus.COMPLETED, RunStatus.FAILED):
            return False
        return not (outcome.waiters or outcome.had_waiters or outcome.next_run is not None or outcome.lifecycle)

    def _commit_simple(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        writes: TurnWrites,
        outcome: Outcome | None,
    ) -> CommitResult:
        """:meth:`commit` in one statement (PostgreSQL); same guarantees, see :mod:`durable.store._pg`."""
        fields, creates, updates, cancel_wake = self._simple_parts(now, writes, outcome)
        written, wake_at, awaited = _pg.commit(run_id, owner, fields, creates, updates, cancel_wake)
        if not written:
            return REFUSED
        if outcome is None:
            return CommitResult(written=True)
        return self._after_simple(run_id, now, outcome, wake_at, awaited)

    def commit_many(
        self, commits: list[tuple[str, str, datetime, datetime, TurnWrites, Outcome]]
    ) -> list[CommitResult | Exception]:
        """Final commits of several turns, each as :meth:`commit` would make it, written together.

        On PostgreSQL the common shapes go in one statement per shape (see
        ``_pg.commit_many``); each run's part is still conditional on its own
        lease, so one lost lease refuses that run's commit alone. Each result
        is :meth:`commit`'s, or the exception that run's own commit raised;
        it does not raise itself. A shared statement that fails wrote nothing
        (it is one statement): its runs are then committed one by one.
        """
        results: list[CommitResult | Exception | None] = [None] * len(commits)
        batch: dict[tuple[Any, ...], list[int]] = {}
        parts: dict[int, tuple[dict[str, Any], list[CheckpointRecord], list[Any], Any]] = {}
        for i, (_, _, now, _, writes, outcome) in enumerate(commits):
            if _pg.usable() and self._simple(writes, outcome) and not any(w.claimed_by for w in writes.checkpoints):
                parts[i] = self._simple_parts(now, writes, outcome)
                fields, _, _, cancel_wake = parts[i]
                batch.setdefault((tuple(fields), cancel_wake is not None), []).append(i)
        for group in batch.values():
            owner = commits[group[0]][1]
            if len(group) == 1 or any(commits[i][1] != owner for i in group):
                continue  # committed alone below
            try:
                written = _pg.commit_many(owner, [(commits[i][0], *parts[i]) for i in group])
            except Exception:  # one statement: nothing of it was written; one by one below
                logger.warning(
                    "shared commit of %d turns failed; committing them one by one", len(group), exc_info=True
                )
                continue
            for i in group:
                run_id, _, now, _, _, outcome = commits[i]
                got = written.get(run_id)
                results[i] = REFUSED
                if got is not None:
                    try:
                        results[i] = self._after_simple(run_id, now, outcome, *got)
                    except Exception as exc:  # noqa: BLE001 - written; only the wake of waiters failed
                        results[i] = exc
        for i, (run_id, owner, now, lease_until, writes, outcome) in enumerate(commits):
            if results[i] is None:  # alone: another shape, a group of one, or a failed shared statement
                try:
                    results[i] = self.commit(run_id, owner, now, lease_until, writes, outcome)
                except Exception as exc:  # noqa: BLE001 - reported for this run alone
                    results[i] = exc
        return [r for r in results if r is not None]

    @staticmethod
    def _simple_parts(
        now: datetime, writes: TurnWrites, outcome: Outcome | None
    ) -> tuple[
        dict[str, Any],
        list[CheckpointRecord],
        list[tuple[CheckpointRecord, tuple[str, ...], str | None]],
        tuple[datetime, datetime | None] | None,
    ]:
        """What the one-statement commit writes: run fields, checkpoints to create and to update."""
        fields: dict[str, Any] = dict(writes.run_fields)
        cancel_wake = None
        if outcome is not None:
            # (A flush leaves the lease's expiry to the keeper: no run write, just a share lock.)
            fields.update(status=outcome.status, updated_at=now, locked_by=None, locked_until=None)
            if outcome.status == RunStatus.SUSPENDED and outcome.cancel_seen:
                fields["wake_at"] = outcome.wake_at
            elif outcome.status == RunStatus.SUSPENDED:
                cancel_wake = (now, outcome.wake_at)
            else:
                fields.update(wake_at=None, finished_at=now, output=outcome.output, error=outcome.error)
        creates = [w.record for w in writes.checkpoints if w.create]
        updates = [(w.record, w.expect, w.claimed_by) for w in writes.checkpoints if not w.create]
        return fields, creates, updates, cancel_wake

    def _after_simple(
        self, run_id: str, now: datetime, outcome: Outcome, wake_at: datetime | None, awaited: bool
    ) -> CommitResult:
        """After a one-statement final commit: a suspended run's wake, a finished run's waiters."""
        if outcome.status == RunStatus.SUSPENDED:
            if outcome.step_seqs and _pg.poke_if_settled(run_id, outcome.step_seqs, now):
                wake_at = now
            return CommitResult(written=True, wake_at=wake_at)
        if awaited or len(outcome.notify) > 1:
            # Nobody can wait for a run that was never awaited (the flag is set under this
            # row's lock by any waiter's commit); a retry's waiters wait on the original run.
            return CommitResult(written=True, woken=tuple(self._wake_waiters(outcome.notify, now)))
        return CommitResult(written=True)

    def _settle_waiters(self, run_id: str, writes: TurnWrites, outcome: Outcome, now: datetime) -> bool:
        """Replace the run's waiters; True when the suspended run was woken at once (``now``)."""
        waiters = outcome.waiters
        waited = writes.consumed_signals or any(w.record.kind in WAIT_KINDS for w in writes.checkpoints)
        if waiters or waited or outcome.had_waiters:
            SignalWaiter.objects.filter(run_id=run_id).delete()
        if waiters:
            SignalWaiter.objects.bulk_create(
                [SignalWaiter(run_id=run_id, name=w.token, seq=w.seq, match=w.match, created_at=now) for w in waiters]
            )
        if outcome.status != RunStatus.SUSPENDED:
            return False
        # A step result or event that settled a checkpoint while the turn ran (we hold the run
        # row, which finish_step takes first) would otherwise wait for the reconcile.
        watched = [w.seq for w in waiters] + outcome.step_seqs
        settled = (
            watched
            and Checkpoint.objects.filter(
                run_id=run_id, seq__in=watched, status__in=(CP_STATUS.COMPLETED, CP_STATUS.FAILED)
            ).exists()
        )
        # Always asked when there are waiters (not only when nothing settled): it also marks
        # awaited runs, whose completion then knows to look for waiters.
        there = bool(waiters) and self._already_there(run_id, waiters)
        if settled or there:
            Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now)
            return True
        return False

    def _already_there(self, run_id: str, waiters: list[Waiter]) -> bool:
        """Did what these waiters wait for happen before they were registered?

        Awaited runs are marked first, under their row locks, whatever else is found.
        """
        runs = [w.token[len(RUN_TOKEN) :] for w in waiters if w.token.startswith(RUN_TOKEN)]
        done = False
        if runs:
            # Row locks serialise with the awaited run's own settle: either it committed
            # first (we see it terminal) or it commits after us (and sees our waiter).
            # The update takes those row locks and marks the runs awaited (their completion
            # then knows to look for waiters); the read after it sees their latest status.
            Run.objects.filter(id__in=runs).update(awaited=True)
            statuses = Run.objects.filter(id__in=runs).values_list("status", flat=True)
            done = any(status in TERMINAL for status in statuses)
        signals = [w.token for w in waiters if not w.token.startswith((RUN_TOKEN, EVENT_TOKEN))]
        if done or (signals and BufferedSignal.objects.filter(run_id=run_id, name__in=signals).exists()):
            return True
        for w in waiters:
            if w.token.startswith(EVENT_TOKEN):
                name = w.token[len(EVENT_TOKEN) :]
                buffered = BufferedEvent.objects.filter(name=name, consumed=False).values_list("payload", flat=True)
                if any(_matches(w.match, payload) for payload in buffered[:500]):
                    return True
        return False

    def _apply(self, run_id: str, writes: TurnWrites, now: datetime) -> list[str]:
        """Apply checkpoint writes, new children and sibling cancellations; return cancelled ids."""
        if writes.new_runs:
            self._insert_runs(writes.new_runs)
        new = [w.record for w in writes.checkpoints if w.create]
        if new:
            Checkpoint.objects.bulk_create([Checkpoint(run_id=run_id, **asdict(rec)) for rec in new])
        for w in writes.checkpoints:
            if w.create:
                continue
            rec = asdict(w.record)
            seq = rec.pop("seq")
            for key in ("name", "kind", "queue", "enqueued_at", "input"):
                rec.pop(key)
            for key in ("started_at", "attempts"):
                if not rec[key]:
                    rec.pop(key)
            target = Checkpoint.objects.filter(run_id=run_id, seq=seq, status__in=w.expect)
            if w.claimed_by is not None:
                if not target.filter(locked_by=w.claimed_by).update(**rec):
                    raise _LeaseGone()  # the claim was taken from us: the turn cannot stand
                continue
            target.update(**rec)
        if writes.consumed_signals:
            BufferedSignal.objects.filter(run_id=run_id, id__in=writes.consumed_signals).delete()
        if writes.cancel_runs:
            return self._cancel_tree(writes.cancel_runs, now)
        return []

    def next_signal(self, run_id: str, name: str, skip: list[int]) -> tuple[int, Any] | None:
        row = (
            BufferedSignal.objects.filter(run_id=run_id, name=name)
            .exclude(id__in=skip)
            .order_by("id")
            .values_list("id", "payload")
            .first()
        )
        return (row[0], row[1]) if row is not None else None
