"""All database access for runs, checkpoints, leases and signals.

Nothing else in django-durable queries or writes these tables. Every status
write is compare-and-set (``UPDATE ... WHERE status IN (...)``) and every
write made on behalf of a lease holder also checks ``locked_by``. Locks are
always taken run row first, then its checkpoints and signals, so concurrent
writers (a turn's commit, a step result, a signal, a cancel) serialise on the
run row and cannot deadlock each other.

Timestamps come from the engine clock (passed in as ``now``), never from the
database, so fake clocks in tests see consistent time everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, DateTimeField, F, Min, Q, Value, When

from durable.engine.context_base import EVENT_TOKEN, RUN_TOKEN, WAIT_KINDS
from durable.engine.ports import (
    CheckpointRecord,
    Outcome,
    RunRecord,
    StepClaim,
    TurnWrites,
    Waiter,
)
from durable.exceptions import InvalidRunState, LeaseLost, RunNotFound
from durable.models import (
    ACTIVE,
    TERMINAL,
    BufferedEvent,
    BufferedSignal,
    Checkpoint,
    CheckpointStatus,
    LifecycleBatch,
    Run,
    RunStatus,
    SignalWaiter,
    WorkerDescriptor,
)

CP_STATUS = CheckpointStatus
# Failed checkpoints that a requeue resets so they run again.
RESETTABLE = ("step", "local", "child", "transaction")


class _LeaseGone(Exception):
    """Rolls a commit back when the lease compare-and-set matched nothing."""


def _matches(match: dict[str, Any] | None, payload: Any) -> bool:
    """``match`` is a subset of ``payload`` (every key present with an equal value)."""
    if not match:
        return True
    return isinstance(payload, dict) and all(k in payload and payload[k] == v for k, v in match.items())


_RUN_FIELDS = [f.name for f in Run._meta.concrete_fields]
_CP_FIELDS = list(CheckpointRecord.__dataclass_fields__)


def _run_record(row: Run) -> RunRecord:
    return RunRecord(**{name: getattr(row, name) for name in RunRecord.__dataclass_fields__})


def _cp_record(row: dict[str, Any]) -> CheckpointRecord:
    return CheckpointRecord(**{name: row[name] for name in _CP_FIELDS})


class DjangoStore:
    """:class:`durable.engine.ports.Store` on the Django ORM."""

    def atomic(self) -> Any:
        """A database transaction (``ctx.transaction`` wraps user writes and a checkpoint in it)."""
        return transaction.atomic()

    # -- runs ----------------------------------------------------------------
    def create_run(self, fields: dict[str, Any]) -> bool:
        """Insert the run unless one with that id exists (idempotent start); True if inserted.

        One statement (``INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id``):
        concurrent callers are decided by the primary key, and a loser on
        PostgreSQL waits for the winner's transaction before learning it lost.
        """
        row = Run(**fields)
        columns = list(Run._meta.concrete_fields)
        quote = connection.ops.quote_name
        names = ", ".join(quote(f.column or f.name) for f in columns)
        sql = (
            f"INSERT INTO {quote(Run._meta.db_table)} ({names}) VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT ({quote('id')}) DO NOTHING RETURNING {quote('id')}"
        )
        params = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in columns]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone() is not None

    def get_run(self, run_id: str) -> RunRecord | None:
        row = Run.objects.filter(id=run_id).first()
        return _run_record(row) if row is not None else None

    def acquire(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        """Take the lease of a pending run, or of a suspended run whose wake is due.

        One compare-and-set statement that returns the run as it now is.
        """
        quote = connection.ops.quote_name
        ts = connection.ops.adapt_datetimefield_value
        columns = ", ".join(quote(f.column or f.name) for f in Run._meta.concrete_fields)
        sql = (
            f"UPDATE {quote(Run._meta.db_table)} SET {quote('status')} = %s, {quote('locked_by')} = %s, "
            f"{quote('locked_until')} = %s, {quote('updated_at')} = %s, "
            f"{quote('started_at')} = COALESCE({quote('started_at')}, %s), {quote('turns')} = {quote('turns')} + 1 "
            f"WHERE {quote('id')} = %s AND ({quote('status')} = %s OR ({quote('status')} = %s AND "
            f"{quote('wake_at')} <= %s)) RETURNING {columns}"
        )
        params = [
            RunStatus.RUNNING,
            owner,
            ts(lease_until),
            ts(now),
            ts(now),
            run_id,
            RunStatus.PENDING,
            RunStatus.SUSPENDED,
            ts(now),
        ]
        rows = list(Run.objects.raw(sql, params))
        return _run_record(rows[0]) if rows else None

    def renew_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> bool:
        return bool(
            Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(locked_until=lease_until)
        )

    def release(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        wake_at: datetime,
        count_recovery: bool,
        max_attempts: int | None = None,
    ) -> str | None:
        """Hand a running run back (suspended, due at ``wake_at``) without an outcome.

        With ``count_recovery`` the handback counts as a recovery; past
        ``max_attempts`` the run goes ``dead`` instead. Returns the status
        written, or None when the lease was no longer ours.
        """
        mine = Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner)
        if count_recovery and max_attempts is not None:
            dead = mine.filter(recovery_attempts__gte=max_attempts).update(
                status=RunStatus.DEAD,
                error={
                    "message": f"the run's turn failed {max_attempts + 1} times in a row; giving up",
                    "code": "max_recovery_attempts",
                    "retryable": False,
                    "type": "Dead",
                    "traceback": None,
                },
                recovery_attempts=F("recovery_attempts") + 1,
                finished_at=now,
                updated_at=now,
                wake_at=None,
                locked_by=None,
                locked_until=None,
            )
            if dead:
                return RunStatus.DEAD
        fields: dict[str, Any] = dict(
            status=RunStatus.SUSPENDED, wake_at=wake_at, locked_by=None, locked_until=None, updated_at=now
        )
        if count_recovery:
            fields["recovery_attempts"] = F("recovery_attempts") + 1
        return RunStatus.SUSPENDED if mine.update(**fields) else None

    def block(self, run_id: str, owner: str, now: datetime, reason: dict[str, Any]) -> bool:
        return bool(
            Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(
                status=RunStatus.BLOCKED, error=reason, locked_by=None, locked_until=None, updated_at=now
            )
        )

    def unblock(self, run_ids: Iterable[str], now: datetime) -> int:
        return Run.objects.filter(id__in=list(run_ids), status=RunStatus.BLOCKED).update(
            status=RunStatus.PENDING, error=None, updated_at=now
        )

    # -- turns -------------------------------------------------------------
    def load_checkpoints(self, run_id: str) -> dict[int, CheckpointRecord]:
        rows = Checkpoint.objects.filter(run_id=run_id).order_by("seq").values(*_CP_FIELDS)
        return {row["seq"]: _cp_record(row) for row in rows}

    def commit(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        writes: TurnWrites,
        outcome: Outcome | None = None,
    ) -> bool:
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
        this one are woken after commit (``outcome.woken``).
        """
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
                if outcome is not None:
                    self._settle_waiters(run_id, writes, outcome, now)
        except _LeaseGone:
            return False
        if outcome is not None:
            tokens = [RUN_TOKEN + rid for rid in cancelled]
            if outcome.status in TERMINAL:
                tokens += outcome.notify
            if tokens:
                outcome.woken = self._wake_waiters(tokens, now)
        return True

    def _settle_waiters(self, run_id: str, writes: TurnWrites, outcome: Outcome, now: datetime) -> None:
        waiters = outcome.waiters
        waited = writes.consumed_signals or any(w.record.kind in WAIT_KINDS for w in writes.checkpoints)
        if waiters or waited or outcome.had_waiters:
            SignalWaiter.objects.filter(run_id=run_id).delete()
        if waiters:
            SignalWaiter.objects.bulk_create(
                [SignalWaiter(run_id=run_id, name=w.token, seq=w.seq, match=w.match, created_at=now) for w in waiters]
            )
        if outcome.status != RunStatus.SUSPENDED:
            return
        # A step result or event that settled a checkpoint while the turn ran (we hold the run
        # row, which finish_step takes first) would otherwise wait for the reconcile.
        watched = [w.seq for w in waiters] + outcome.step_seqs
        settled = (
            watched
            and Checkpoint.objects.filter(
                run_id=run_id, seq__in=watched, status__in=(CP_STATUS.COMPLETED, CP_STATUS.FAILED)
            ).exists()
        )
        if settled or (waiters and self._already_there(run_id, waiters)):
            Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now)
            outcome.wake_at = now

    def _already_there(self, run_id: str, waiters: list[Waiter]) -> bool:
        """Did what these waiters wait for happen before they were registered?"""
        signals = [w.token for w in waiters if not w.token.startswith((RUN_TOKEN, EVENT_TOKEN))]
        if signals and BufferedSignal.objects.filter(run_id=run_id, name__in=signals).exists():
            return True
        runs = [w.token[len(RUN_TOKEN) :] for w in waiters if w.token.startswith(RUN_TOKEN)]
        if runs:
            # Row locks serialise with the awaited run's own settle: either it committed
            # first (we see it terminal) or it commits after us (and sees our waiter).
            statuses = Run.objects.select_for_update().filter(id__in=runs).values_list("status", flat=True)
            if any(status in TERMINAL for status in statuses):
                return True
        for w in waiters:
            if w.token.startswith(EVENT_TOKEN):
                name = w.token[len(EVENT_TOKEN) :]
                buffered = BufferedEvent.objects.filter(name=name, consumed=False).values_list("payload", flat=True)
                if any(_matches(w.match, payload) for payload in buffered[:500]):
                    return True
        return False

    def _wake_waiters(self, tokens: list[str], now: datetime) -> list[str]:
        """Wake the suspended runs waiting on any of ``tokens``; return their ids."""
        ids = list(SignalWaiter.objects.filter(name__in=tokens).values_list("run_id", flat=True).distinct())
        if not ids:
            return []
        Run.objects.filter(id__in=ids, status=RunStatus.SUSPENDED).update(wake_at=now)
        return ids

    def _insert_runs(self, rows: list[dict[str, Any]]) -> list[str]:
        """Insert runs that do not exist yet (idempotent on id); return the ids created."""
        ids = [row["id"] for row in rows]
        existing = set(Run.objects.filter(id__in=ids).values_list("id", flat=True))
        new = [Run(**row) for row in rows if row["id"] not in existing]
        Run.objects.bulk_create(new)
        return [run.id for run in new]

    def _lock_event(self, name: str) -> None:
        """Serialise publishers and waiters of one event name (PostgreSQL; SQLite serialises all writes)."""
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["durable-event:" + name])

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
            Checkpoint.objects.filter(run_id=run_id, seq=seq, status__in=w.expect).update(**rec)
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

    # -- signals and cancellation ------------------------------------------
    def signal(self, run_id: str, name: str, payload: Any, now: datetime) -> bool:
        """Buffer a signal and wake the run if it waits for that name. Returns True if woken."""
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status in TERMINAL:
                raise InvalidRunState(f"run {run_id!r} is {status}; it takes no more signals")
            BufferedSignal.objects.create(run_id=run_id, name=name, payload=payload, created_at=now)
            if SignalWaiter.objects.filter(run_id=run_id, name=name).exists():
                return bool(
                    Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now, updated_at=now)
                )
        return False

    def cancel(self, run_id: str, now: datetime, compensate: bool = False) -> tuple[bool, list[str]]:
        """Cancel an active run and, recursively, its active children.

        Returns (whether anything was cancelled, runs to dispatch a turn for).
        With ``compensate`` the runs are not stopped here: they are marked and
        woken so their next turn undoes their completed steps and ends
        ``cancelled`` (a blocked run, which cannot execute, is cancelled outright).
        """
        woken: list[str] = []
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in ACTIVE:
                return False, []
            if not compensate or status == RunStatus.BLOCKED:
                cancelled = self._cancel_tree([run_id], now)
            else:
                tree = self._subtree([run_id])
                Run.objects.filter(id__in=tree, status__in=ACTIVE).exclude(status=RunStatus.BLOCKED).update(
                    cancel_requested=True, updated_at=now
                )
                Run.objects.filter(id__in=tree, status=RunStatus.SUSPENDED).update(wake_at=now)
                cancelled = self._cancel_tree(
                    list(Run.objects.filter(id__in=tree, status=RunStatus.BLOCKED).values_list("id", flat=True)), now
                )
                woken = tree
        if cancelled:
            woken += self._wake_waiters([RUN_TOKEN + rid for rid in cancelled], now)
        return True, woken

    def _subtree(self, roots: list[str]) -> list[str]:
        """``roots`` and all their active descendants (children, grandchildren...)."""
        found = list(roots)
        frontier = list(roots)
        while frontier:
            frontier = list(Run.objects.filter(parent_id__in=frontier, status__in=ACTIVE).values_list("id", flat=True))
            frontier = [rid for rid in frontier if rid not in found]
            found += frontier
        return found

    def _cancel_tree(self, roots: list[str], now: datetime) -> list[str]:
        """Cancel ``roots`` and their active descendants; return the ids cancelled."""
        if not roots:
            return []
        tree = self._subtree(roots)
        ids = list(Run.objects.filter(id__in=tree, status__in=ACTIVE).values_list("id", flat=True))
        Run.objects.filter(id__in=ids, status__in=ACTIVE).update(
            status=RunStatus.CANCELLED,
            finished_at=now,
            updated_at=now,
            wake_at=None,
            locked_by=None,
            locked_until=None,
        )
        SignalWaiter.objects.filter(run_id__in=ids).delete()
        return ids

    # -- named events --------------------------------------------------------
    def publish_event(self, name: str, payload: Any, event_id: str, now: datetime) -> dict[str, Any]:
        """Deliver an event to every matching waiter, or buffer it once for the first one.

        Runs inside the caller's transaction (subscribers are started in the same
        one). Idempotent on ``event_id``: a second publish delivers nothing.
        """
        self._lock_event(name)
        if BufferedEvent.objects.filter(event_id=event_id).exists():
            return {"duplicate": True, "delivered": [], "buffered": False}
        delivered = []
        waiters = (
            SignalWaiter.objects.filter(name=EVENT_TOKEN + name)
            .order_by("created_at", "id")
            .values("id", "run_id", "seq", "match")
        )
        for w in waiters:
            if not _matches(w["match"], payload):
                continue
            taken = Checkpoint.objects.filter(
                run_id=w["run_id"], seq=w["seq"], kind="event", status=CP_STATUS.PENDING
            ).update(status=CP_STATUS.COMPLETED, output=payload, finished_at=now)
            if taken:
                delivered.append(w["run_id"])
                SignalWaiter.objects.filter(id=w["id"]).delete()
        BufferedEvent.objects.create(
            event_id=event_id, name=name, payload=payload, consumed=bool(delivered), created_at=now
        )
        return {"duplicate": False, "delivered": delivered, "buffered": not delivered}

    def take_event(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        seq: int,
        name: str,
        match: dict[str, Any] | None,
        create: bool,
    ) -> tuple[Any] | None:
        """Consume the oldest unconsumed buffered event matching ``match`` into checkpoint ``seq``.

        Older non-matching events are skipped, not a barrier.
        """
        with transaction.atomic():
            self._lock_event(name)
            rows = BufferedEvent.objects.filter(name=name, consumed=False).order_by("id").values("id", "payload")
            pick = next((row for row in rows[:500] if _matches(match, row["payload"])), None)
            if pick is None:
                return None
            if not Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner).update(
                locked_until=lease_until
            ):
                raise LeaseLost()
            BufferedEvent.objects.filter(id=pick["id"]).update(consumed=True)
            if create:
                Checkpoint.objects.create(
                    run_id=run_id,
                    seq=seq,
                    name=name,
                    kind="event",
                    status=CP_STATUS.COMPLETED,
                    input={"match": match},
                    output=pick["payload"],
                    started_at=now,
                    finished_at=now,
                )
            else:
                Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CP_STATUS.PENDING).update(
                    status=CP_STATUS.COMPLETED, output=pick["payload"], finished_at=now
                )
        return (pick["payload"],)

    def notify_settled(self, run_id: str, now: datetime) -> list[str]:
        """Wake runs waiting on ``run_id`` (or on the run it retries) after it settled outside a turn."""
        retry_of = Run.objects.filter(id=run_id).values_list("retry_of", flat=True).first()
        tokens = [RUN_TOKEN + run_id] + ([RUN_TOKEN + retry_of] if retry_of else [])
        return self._wake_waiters(tokens, now)

    def wake(self, run_ids: list[str], now: datetime) -> None:
        if run_ids:
            Run.objects.filter(id__in=run_ids, status=RunStatus.SUSPENDED).update(wake_at=now)

    # -- lifecycle events ------------------------------------------------------
    def take_lifecycle_lease(self, run_id: str, owner: str, now: datetime, lease_until: datetime) -> RunRecord | None:
        """Hold a settled run for publishing its lifecycle event; the run as re-read under the lease."""
        taken = (
            Run.objects.filter(id=run_id, status__in=TERMINAL)
            .filter(Q(locked_until__isnull=True) | Q(locked_until__lt=now))
            .update(locked_by=owner, locked_until=lease_until)
        )
        if not taken:
            return None
        row = Run.objects.filter(id=run_id, locked_by=owner).first()
        return _run_record(row) if row is not None else None

    def release_lifecycle_lease(self, run_id: str, owner: str) -> None:
        Run.objects.filter(id=run_id, status__in=TERMINAL, locked_by=owner).update(locked_by=None, locked_until=None)

    def finish_lifecycle(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        record: dict[str, Any],
        new_runs: list[dict[str, Any]],
        batched: list[tuple[str, Any, str, dict[str, Any]]],
        make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None],
    ) -> list[str]:
        """Start subscribers, feed accumulators and record it all on the source run, atomically.

        Only while holding the run's lifecycle lease. Returns the runs created.
        """
        with transaction.atomic():
            if not Run.objects.filter(id=run_id, locked_by=owner).update(
                lifecycle=record, lifecycle_owed=bool(record.get("owed"))
            ):
                raise LeaseLost()
            created = self._insert_runs(new_runs) if new_runs else []
            for subscriber, value, source_id, policy in batched:
                created += self._accumulate(subscriber, value, source_id, policy, now, make_batch_run)
        return created

    def _accumulate(
        self,
        subscriber: str,
        value: Any,
        source_id: str,
        policy: dict[str, Any],
        now: datetime,
        make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None],
    ) -> list[str]:
        row = LifecycleBatch.objects.select_for_update().filter(subscriber=subscriber, key="").first()
        if row is None:
            window = policy.get("debounce", policy.get("window", 0))
            row = LifecycleBatch.objects.create(
                subscriber=subscriber, opened_at=now, fire_at=now + timedelta(seconds=window)
            )
        if source_id in row.source_ids:
            return []  # this accumulator already holds that run's event
        row.events = [*row.events, value]
        row.source_ids = [*row.source_ids, source_id]
        if "debounce" in policy:
            row.fire_at = now + timedelta(seconds=policy["debounce"])
        if "size" in policy and len(row.events) >= policy["size"]:
            return self._fire(row, make_batch_run)
        row.save(update_fields=["events", "source_ids", "fire_at"])
        return []

    def _fire(
        self, row: LifecycleBatch, make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None]
    ) -> list[str]:
        fields = make_batch_run(row.subscriber, row.id, list(row.events))
        if fields is None:
            return []
        created = self._insert_runs([fields])
        LifecycleBatch.objects.filter(id=row.id).delete()
        return created

    def fire_due_batches(
        self, now: datetime, limit: int, make_batch_run: Callable[[str, int, list[Any]], dict[str, Any] | None]
    ) -> list[str]:
        """Start the subscriber run of every accumulator whose time has come."""
        created: list[str] = []
        for batch_id in LifecycleBatch.objects.filter(fire_at__lte=now).values_list("id", flat=True)[:limit]:
            with transaction.atomic():
                row = LifecycleBatch.objects.select_for_update(skip_locked=True).filter(id=batch_id).first()
                if row is not None and row.fire_at <= now:
                    created += self._fire(row, make_batch_run)
        return created

    def owed_runs(self, before: datetime, limit: int) -> list[str]:
        return list(
            Run.objects.filter(lifecycle_owed=True, finished_at__lte=before)
            .order_by("finished_at")
            .values_list("id", flat=True)[:limit]
        )

    def settled_since(self, workflows: list[str], since: datetime, limit: int) -> list[RunRecord]:
        rows = Run.objects.filter(
            workflow__in=workflows,
            status__in=(RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD),
            finished_at__gte=since,
            continued_to__isnull=True,
        ).order_by("-finished_at")[:limit]
        return [_run_record(row) for row in rows]

    def mark_owed(self, run_id: str, subscribers: list[str]) -> bool:
        """Add subscribers to a settled run's owed set (heal); no-op if another publisher holds it."""
        with transaction.atomic():
            row = Run.objects.select_for_update().filter(id=run_id).values("lifecycle").first()
            if row is None:
                return False
            record = dict(row["lifecycle"] or {})
            record["owed"] = sorted(set(record.get("owed", [])) | set(subscribers))
            return bool(Run.objects.filter(id=run_id).update(lifecycle=record, lifecycle_owed=True))

    def republish_targets(
        self,
        *,
        run_id: str | None,
        workflow: str | None,
        statuses: list[str],
        since: datetime | None,
        until: datetime | None,
        limit: int,
    ) -> list[str]:
        qs = Run.objects.filter(status__in=statuses, continued_to__isnull=True)
        if run_id is not None:
            qs = qs.filter(id=run_id)
        if workflow is not None:
            qs = qs.filter(workflow=workflow)
        if since is not None:
            qs = qs.filter(finished_at__gte=since)
        if until is not None:
            qs = qs.filter(finished_at__lt=until)
        return list(qs.order_by("finished_at").values_list("id", flat=True)[:limit])

    # -- reads ---------------------------------------------------------------
    def list_runs(
        self,
        *,
        statuses: list[str],
        workflow: str | None,
        namespace: str | None,
        tag: str | None,
        attributes: list[tuple[str, str, Any]],
        created_after: datetime | None,
        created_before: datetime | None,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        qs = self.runs_queryset(
            statuses=statuses, workflow=workflow, namespace=namespace, tag=tag, attributes=attributes
        )
        if created_after is not None:
            qs = qs.filter(created_at__gte=created_after)
        if created_before is not None:
            qs = qs.filter(created_at__lt=created_before)
        if after is not None:
            qs = qs.filter(Q(created_at__lt=after[0]) | Q(created_at=after[0], id__lt=after[1]))
        return [_run_record(row) for row in qs.order_by("-created_at", "-id")[:limit]]

    def runs_queryset(
        self,
        *,
        statuses: list[str] | None = None,
        workflow: str | None = None,
        namespace: str | None = None,
        tag: str | None = None,
        attributes: list[tuple[str, str, Any]] | None = None,
    ) -> Any:
        """Runs filtered as :func:`durable.list_runs` does (shared with the dashboard)."""
        qs = Run.objects.all()
        if statuses:
            qs = qs.filter(status__in=statuses)
        if workflow:
            qs = qs.filter(workflow=workflow)
        if namespace:
            qs = qs.filter(namespace=namespace)
        if tag:
            if connection.vendor == "postgresql":
                qs = qs.filter(tags__contains=[tag])
            else:
                qs = qs.extra(
                    where=["EXISTS (SELECT 1 FROM json_each(durable_run.tags) WHERE value = %s)"], params=[tag]
                )
        for key, op, value in attributes or []:
            path = f"search_attributes__{key}"
            qs = qs.filter(**{"search_attributes__has_key": key})
            if op == "eq":
                qs = qs.filter(**{path: value})
            elif op == "ne":
                qs = qs.exclude(**{path: value})
            else:
                qs = qs.filter(**{f"{path}__{op}": value})
        return qs

    def resolve_run(self, run_id: str) -> RunRecord | None:
        """The run whose outcome stands for ``run_id``.

        Follows continue-as-new to the chain's latest run; for a failed or dead
        run, a completed retry-with-input of it stands in for it.
        """
        row = Run.objects.filter(id=run_id).first()
        seen: set[str] = set()
        while row is not None and row.continued_to and row.continued_to not in seen:
            seen.add(row.id)
            row = Run.objects.filter(id=row.continued_to).first()
        if row is not None and row.status in (RunStatus.FAILED, RunStatus.DEAD):
            retry = Run.objects.filter(retry_of=row.id, status=RunStatus.COMPLETED).order_by("-finished_at").first()
            if retry is not None:
                return self.resolve_run(retry.id)
        return _run_record(row) if row is not None else None

    # -- operator repairs ----------------------------------------------------
    def requeue(self, run_id: str, now: datetime, deadline_at: datetime | None) -> list[str]:
        """Put a failed or dead run back to ``pending`` so it really runs again.

        History from the first failed step or child onwards is dropped
        (everything after it was decided by that failure), so replay executes
        it afresh instead of replaying its failure. Completed checkpoints before
        it, including a late success that landed after the run failed, are
        kept. Failed children it awaited are requeued too, recursively. The
        recovery count starts again from zero. Returns the ids requeued.
        """
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in (RunStatus.FAILED, RunStatus.DEAD):
                raise InvalidRunState(f"run {run_id!r} is {status}; only failed or dead runs can be requeued")
            return self._requeue(run_id, now, {"deadline_at": deadline_at})

    def _requeue(self, run_id: str, now: datetime, extra: dict[str, Any]) -> list[str]:
        failed = Checkpoint.objects.filter(run_id=run_id, status=CP_STATUS.FAILED, kind__in=RESETTABLE)
        first_failed = failed.aggregate(m=Min("seq"))["m"]
        requeued = [run_id]
        if first_failed is not None:
            dropped = Checkpoint.objects.filter(run_id=run_id, seq__gte=first_failed)
            children = [
                (row or {}).get("run_id")
                for row in dropped.filter(kind="child", status=CP_STATUS.FAILED).values_list("input", flat=True)
            ]
            dropped.delete()
            for child_id in children:
                if child_id and Run.objects.filter(id=child_id, status__in=(RunStatus.FAILED, RunStatus.DEAD)).exists():
                    requeued += self._requeue(child_id, now, {})
        Run.objects.filter(id=run_id, status__in=(RunStatus.FAILED, RunStatus.DEAD)).update(
            status=RunStatus.PENDING,
            error=None,
            output=None,
            finished_at=None,
            wake_at=None,
            locked_by=None,
            locked_until=None,
            recovery_attempts=0,
            cancel_requested=False,
            updated_at=now,
            **extra,
        )
        return requeued

    def pending_steps(self, run_id: str, now: datetime, new_wake: datetime) -> list[tuple[int, str | None]]:
        """Mark every pending dispatched step of an active run for re-dispatch; return them."""
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if status not in ACTIVE:
                raise InvalidRunState(f"run {run_id!r} is {status}; its steps are not dispatched any more")
            pending = Checkpoint.objects.filter(run_id=run_id, kind="step", status=CP_STATUS.PENDING)
            rows = list(pending.values_list("seq", "queue"))
            pending.update(wake_at=new_wake, retry_at=None, dispatches=F("dispatches") + 1)
        return rows

    # -- dispatched steps ----------------------------------------------------
    def claim_step(
        self,
        run_id: str,
        seq: int,
        owner: str,
        now: datetime,
        lease_until: datetime,
        timeout_of: Callable[[str], float | None] = lambda name: None,
    ) -> StepClaim | None:
        with transaction.atomic():
            # Lock the checkpoint row only (no join to the run for ordering): the run row is
            # locked first everywhere else, and this must not take it in the other order.
            row = (
                Checkpoint.objects.select_for_update(of=("self",))
                .filter(run_id=run_id, seq=seq, kind="step")
                .order_by()
                .values("id", "name", "status", "input", "attempts", "retry_at")
                .first()
            )
            if row is None or row["status"] != CP_STATUS.PENDING:
                return None
            if row["retry_at"] is not None and row["retry_at"] > now:
                return None  # a retry that is not due yet
            run = Run.objects.filter(id=run_id).values_list("status", "namespace").first()
            if run is None or run[0] not in ACTIVE:
                return None
            timeout = timeout_of(row["name"])
            Checkpoint.objects.filter(id=row["id"]).update(
                status=CP_STATUS.RUNNING,
                attempts=F("attempts") + 1,
                locked_by=owner,
                wake_at=lease_until,
                dispatches=0,
                started_at=now,
                timeout_at=now + timedelta(seconds=timeout) if timeout else None,
            )
        return StepClaim(run_id, seq, row["name"], row["input"], row["attempts"] + 1, run[1])

    def renew_step(self, run_id: str, seq: int, owner: str, lease_until: datetime) -> bool:
        return bool(
            Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CP_STATUS.RUNNING, locked_by=owner).update(
                wake_at=lease_until
            )
        )

    def heartbeat_step(self, run_id: str, seq: int, now: datetime, progress: Any, lease_until: datetime) -> None:
        """Record liveness and progress; push the execution lease out once half of it is spent."""
        running = Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CP_STATUS.RUNNING)
        running.update(heartbeat_at=now, progress=progress)
        half = now + (lease_until - now) / 2
        running.filter(wake_at__lt=half).update(wake_at=lease_until)

    def finish_step(
        self,
        run_id: str,
        seq: int,
        now: datetime,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
        retry_at: datetime | None = None,
    ) -> bool:
        """Settle (or schedule the retry of) a dispatched step; wake its run.

        Returns True when the run was woken and should take its next turn.
        A duplicate result finds the checkpoint settled, changes nothing, and
        still wakes the run so a resume lost after the first result is re-driven.
        """
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None or status in (RunStatus.CANCELLED, RunStatus.COMPLETED):
                return False
            open_cp = Checkpoint.objects.filter(
                run_id=run_id, seq=seq, status__in=(CP_STATUS.PENDING, CP_STATUS.RUNNING)
            )
            if retry_at is not None:
                open_cp.update(
                    status=CP_STATUS.PENDING, error=error, retry_at=retry_at, wake_at=retry_at, locked_by=None
                )
                return False
            if error is not None:
                open_cp.update(status=CP_STATUS.FAILED, error=error, wake_at=None, finished_at=now, locked_by=None)
            else:
                open_cp.update(
                    status=CP_STATUS.COMPLETED, output=output, error=None, wake_at=None, finished_at=now, locked_by=None
                )
            if status != RunStatus.SUSPENDED:
                return False
            return bool(Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now))

    def poke_if_settled(self, run_id: str, seq: int, now: datetime) -> bool:
        settled = Checkpoint.objects.filter(
            run_id=run_id, seq=seq, status__in=(CP_STATUS.COMPLETED, CP_STATUS.FAILED)
        ).exists()
        return settled and self.poke(run_id, now)

    def poke(self, run_id: str, now: datetime) -> bool:
        return bool(Run.objects.filter(id=run_id, status=RunStatus.SUSPENDED).update(wake_at=now))

    # -- sweeps ------------------------------------------------------------
    def due_runs(self, now: datetime, limit: int) -> list[str]:
        pending = list(
            Run.objects.filter(status=RunStatus.PENDING)
            .order_by("-priority", "created_at")
            .values_list("id", flat=True)[:limit]
        )
        suspended = list(
            Run.objects.filter(status=RunStatus.SUSPENDED, wake_at__lte=now)
            .order_by("wake_at")
            .values_list("id", flat=True)[: max(limit - len(pending), 0)]
        )
        return pending + suspended

    def due_steps(self, now: datetime, limit: int) -> list[tuple[str, int, str | None]]:
        """Pending dispatched steps that may be claimed now (fresh, or retry due)."""
        rows = (
            Checkpoint.objects.filter(kind="step", status=CP_STATUS.PENDING, run__status__in=ACTIVE)
            .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
            .order_by("enqueued_at")
            .values_list("run_id", "seq", "queue")[:limit]
        )
        return list(rows)

    def orphans(self, now: datetime, limit: int) -> list[str]:
        return list(
            Run.objects.filter(status=RunStatus.RUNNING, locked_until__lt=now).values_list("id", flat=True)[:limit]
        )

    def recover_orphan(
        self,
        run_id: str,
        owner: str,
        now: datetime,
        lease_until: datetime,
        max_attempts: int,
        dead_lifecycle: Callable[[str], dict[str, Any] | None] = lambda workflow: None,
    ) -> RunRecord | str | None:
        """Take an expired lease and decide on the run as re-read under it.

        Returns the run (lease held, recovery counted) to run a turn on,
        ``"dead"`` when it exceeded ``max_attempts``, or None when it was not an
        orphan after all (lease renewed, run moved on, or a concurrent cancel).
        """
        taken = Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_until__lt=now).update(
            locked_by=owner, locked_until=lease_until
        )
        if not taken:
            return None
        row = Run.objects.filter(id=run_id).first()
        if row is None or row.status != RunStatus.RUNNING or row.locked_by != owner:
            return None
        attempts = row.recovery_attempts + 1
        mine = Run.objects.filter(id=run_id, status=RunStatus.RUNNING, locked_by=owner)
        if attempts > max_attempts:
            error = {
                "message": f"run was orphaned {attempts} times (limit {max_attempts}); giving up",
                "code": "max_recovery_attempts",
                "retryable": False,
                "type": "Dead",
                "traceback": None,
            }
            lifecycle = dead_lifecycle(row.workflow)
            dead = mine.update(
                status=RunStatus.DEAD,
                error=error,
                lifecycle=lifecycle or {},
                lifecycle_owed=bool(lifecycle),
                recovery_attempts=attempts,
                finished_at=now,
                updated_at=now,
                locked_by=None,
                locked_until=None,
            )
            return "dead" if dead else None
        if not mine.update(recovery_attempts=attempts, turns=F("turns") + 1, updated_at=now):
            return None
        row.recovery_attempts = attempts
        row.turns += 1
        return _run_record(row)

    def overdue_runs(self, now: datetime, limit: int) -> list[str]:
        return list(Run.objects.filter(deadline_at__lt=now, status__in=ACTIVE).values_list("id", flat=True)[:limit])

    def fail_overdue(
        self, run_id: str, now: datetime, error: dict[str, Any], lifecycle: dict[str, Any] | None = None
    ) -> bool:
        with transaction.atomic():
            failed = Run.objects.filter(id=run_id, deadline_at__lt=now, status__in=ACTIVE).update(
                status=RunStatus.FAILED,
                error=error,
                lifecycle=lifecycle or {},
                lifecycle_owed=bool(lifecycle),
                finished_at=now,
                updated_at=now,
                wake_at=None,
                locked_by=None,
                locked_until=None,
            )
            if failed:
                SignalWaiter.objects.filter(run_id=run_id).delete()
        return bool(failed)

    def expired_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]:
        """Running steps whose execution lease lapsed (worker gone) or whose timeout passed."""
        rows = (
            Checkpoint.objects.filter(kind="step", status=CP_STATUS.RUNNING)
            .filter(Q(wake_at__lt=now) | Q(timeout_at__lt=now))
            .values("run_id", "seq", "name", "queue", "attempts", "wake_at", "timeout_at")[:limit]
        )
        return [dict(row) for row in rows]

    def reset_step(self, run_id: str, seq: int, expected_wake: datetime | None, new_wake: datetime) -> bool:
        """Put a running step whose worker vanished back to pending (same step id)."""
        cp = Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CP_STATUS.RUNNING, wake_at=expected_wake)
        return bool(
            cp.update(status=CP_STATUS.PENDING, locked_by=None, wake_at=new_wake, dispatches=F("dispatches") + 1)
        )

    def lost_steps(self, now: datetime, limit: int) -> list[dict[str, Any]]:
        """Pending dispatched steps that no worker took before their redelivery time."""
        rows = (
            Checkpoint.objects.filter(kind="step", status=CP_STATUS.PENDING, wake_at__lte=now, run__status__in=ACTIVE)
            .order_by("wake_at")
            .values("run_id", "seq", "name", "queue", "dispatches", "wake_at", "retry_at")[:limit]
        )
        return [dict(row) for row in rows]

    def redispatch_step(self, run_id: str, seq: int, expected_wake: datetime | None, new_wake: datetime) -> bool:
        """Claim the right to re-dispatch a pending step (compare-and-set on its wake time)."""
        cp = Checkpoint.objects.filter(run_id=run_id, seq=seq, status=CP_STATUS.PENDING, wake_at=expected_wake)
        return bool(cp.update(wake_at=new_wake, dispatches=F("dispatches") + 1))

    def blocked_runs(self, limit: int) -> list[dict[str, Any]]:
        rows = Run.objects.filter(status=RunStatus.BLOCKED).values("id", "workflow", "version", "error")[:limit]
        return [dict(row) for row in rows]

    def next_due(self) -> datetime | None:
        """The earliest moment at which some work falls due (for test drivers)."""
        run_wake = Run.objects.filter(status=RunStatus.SUSPENDED).aggregate(m=Min("wake_at"))["m"]
        step_wake = Checkpoint.objects.filter(
            kind="step", status__in=(CP_STATUS.PENDING, CP_STATUS.RUNNING), wake_at__isnull=False
        ).aggregate(m=Min("wake_at"))["m"]
        candidates = [d for d in (run_wake, step_wake) if d is not None]
        return min(candidates) if candidates else None

    # -- worker fleet ------------------------------------------------------
    def advertise(self, descriptor: dict[str, Any], now: datetime, expires_at: datetime) -> None:
        WorkerDescriptor.objects.update_or_create(
            id=descriptor["id"], defaults={**descriptor, "heartbeat_at": now, "expires_at": expires_at}
        )

    def refresh_worker(self, worker_id: str, now: datetime, expires_at: datetime) -> bool:
        return bool(WorkerDescriptor.objects.filter(id=worker_id).update(heartbeat_at=now, expires_at=expires_at))

    def retire_worker(self, worker_id: str) -> None:
        WorkerDescriptor.objects.filter(id=worker_id).delete()

    def live_workers(self, now: datetime) -> list[dict[str, Any]]:
        return [dict(row) for row in WorkerDescriptor.objects.filter(expires_at__gt=now).values()]

    def prune_workers(self, now: datetime) -> int:
        return WorkerDescriptor.objects.filter(expires_at__lt=now - timedelta(hours=1)).delete()[0]


store = DjangoStore()
