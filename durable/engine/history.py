"""A run's history as one turn replays it: positions, replay lookup, checkpoint records.

Replay rules (Principle 5): each durable operation takes the next position
(``seq``); a checkpoint recorded at that position by an earlier turn is
returned for the operation to replay; a checkpoint of a different name or kind
is non-determinism, remembered here so that a user ``except Exception`` cannot
hide it. The records this turn writes are built here too (one constructor per
shape), so every operation writes its checkpoints the same way.

Records as loaded (``loaded``) are never handed to user code: they may be
shared with this process's history cache (:mod:`durable.engine.history_cache`)
and outlive the turn, so :meth:`History.take` gives the workflow a copy of a
loaded record's output and error (a result the code mutates in place cannot
change what a later replay sees).

Not thread-safe: a History belongs to the one turn that replays it.
"""

from __future__ import annotations

from typing import Any

from durable.engine.clock import Clock
from durable.engine.ports import CheckpointRecord, CheckpointWrite
from durable.engine.vocab import UNSETTLED, WAIT_KINDS, CheckpointKind, CheckpointStatus
from durable.exceptions import CancelRequested, NonDeterminismError

PENDING = CheckpointStatus.PENDING
RUNNING = CheckpointStatus.RUNNING
COMPLETED = CheckpointStatus.COMPLETED
FAILED = CheckpointStatus.FAILED
# What an update of a checkpoint in flight may find (pending, or a step claimed and running).
IN_FLIGHT: tuple[str, ...] = UNSETTLED
ONLY_PENDING: tuple[str, ...] = (PENDING,)


def cancelled_error(message: str = "cancelled", **extra: Any) -> dict[str, Any]:
    """The error recorded for an operation (or a run) stopped by a cancel."""
    return {
        "message": message,
        "code": "cancelled",
        "retryable": False,
        "type": "Cancelled",
        "traceback": None,
        **extra,
    }


def copied(value: Any) -> Any:
    """A copy of a JSON value's containers (scalars are immutable and shared)."""
    # Exact types: JSON decodes to plain dicts and lists, and a replay walks every recorded value.
    if type(value) is dict:
        return {k: v if type(v) is not dict and type(v) is not list else copied(v) for k, v in value.items()}
    if type(value) is list:
        return [v if type(v) is not dict and type(v) is not list else copied(v) for v in value]
    return value


def _mutable(value: Any) -> bool:
    return type(value) is dict or type(value) is list


def thawed(cp: CheckpointRecord) -> CheckpointRecord:
    """``cp`` as user code may receive it: its own copies of its output and error (``cp`` itself if scalars).

    Its ``input`` stays shared: the one place it reaches user code, a
    compensation, copies it (:meth:`OpsBase._remember_undo`).
    """
    if not (_mutable(cp.output) or _mutable(cp.error)):
        return cp
    # A shallow copy without dataclasses.replace's per-field __init__ (a replay thaws every record).
    copy = object.__new__(CheckpointRecord)
    copy.__dict__.update(cp.__dict__)
    copy.output, copy.error = copied(cp.output), copied(cp.error)
    return copy


class History:
    """The checkpoints replay reads, the position the workflow is at, and the records it writes.

    ``records`` starts as the history loaded for the turn and follows every
    write the turn defers, so a position is never taken twice. ``cancelling``
    (a cancel with undo reached the run): the first operation without an
    outcome stops the workflow; ``compensating``: the undo steps are running
    and take new positions normally.
    """

    __slots__ = (
        "cancelling",
        "clock",
        "compensating",
        "fresh",
        "had_waiters",
        "kept",
        "loaded",
        "max_recorded",
        "nondeterminism",
        "records",
        "run_id",
        "seq",
        "touched",
    )

    def __init__(
        self,
        run_id: str,
        records: dict[int, CheckpointRecord],
        clock: Clock,
        *,
        cancelling: bool,
        kept: dict[int, CheckpointRecord] | None = None,
        fresh: dict[int, CheckpointRecord] | None = None,
    ) -> None:
        """``kept`` and ``fresh``: when ``records`` were restored from the history cache, the settled
        records its entry kept (read, and their payloads checked, by an earlier turn) and those read now."""
        self.run_id = run_id
        self.kept = kept
        self.fresh = records if fresh is None else fresh
        # ``loaded`` keeps the records as read (never mutated, never given to user code);
        # ``records`` follows the turn: copies handed out, and every write it remembered.
        self.loaded = records
        self.records = dict(records)
        # Positions this turn wrote (or the store wrote for it): their rows may differ from the record.
        self.touched: set[int] = set()
        self.clock = clock
        self.seq = 0
        self.max_recorded = max(records, default=0)
        # A wait was pending when the turn began (so waiter rows may exist).
        self.had_waiters = any(cp.kind in WAIT_KINDS and cp.status == PENDING for cp in self.fresh.values())
        self.nondeterminism: NonDeterminismError | None = None
        self.cancelling = cancelling
        self.compensating = False

    # -- positions ---------------------------------------------------------
    def take(self, name: str, kind: str) -> tuple[int, CheckpointRecord | None]:
        """Take the next position for operation ``kind``/``name``; return it and what it recorded.

        Raises NonDeterminismError when the position recorded another
        operation, and CancelRequested (giving the position back if nothing
        was recorded there) when a cancel with undo stops the workflow here.
        """
        self.seq += 1
        seq = self.seq
        cp = self._handed_out(seq)
        if cp is not None and (cp.name != name or cp.kind != kind):
            self.nondeterminism = NonDeterminismError(
                f"run {self.run_id!r} position {seq}: the code asked for {kind} {name!r} "
                f"but the history recorded {cp.kind} {cp.name!r}. The workflow changed under "
                "a run in flight; guard the change with ctx.patched(...) or start a new version."
            )
            raise self.nondeterminism
        if self.cancelling and not self.compensating and (cp is None or cp.status in IN_FLIGHT):
            # Its position stays taken if it was recorded (the undo steps go after it).
            if cp is None:
                self.seq -= 1
            raise CancelRequested()
        return seq, cp

    def retake(self, seq: int) -> CheckpointRecord | None:
        """Stand at position ``seq`` again, for the operation a resumed workflow was waiting in.

        What that position holds now, as :meth:`take` would hand it out. The
        operation took it in an earlier turn (so it is the same operation); a
        resumed turn never replays the positions before it.
        """
        self.seq = seq
        return self._handed_out(seq)

    def _handed_out(self, seq: int) -> CheckpointRecord | None:
        """The record at ``seq`` as user code may receive it: a loaded one is thawed once, on first use."""
        cp = self.records.get(seq)
        if cp is not None and cp is self.loaded.get(seq):
            cp = self.records[seq] = thawed(cp)
        return cp

    def is_replaying(self) -> bool:
        """The next position was already recorded by an earlier turn."""
        return (self.seq + 1) in self.records

    def at_frontier(self) -> bool:
        """No position at or after the next one is recorded: the code is running new ground."""
        return self.max_recorded <= self.seq

    def remember(self, record: CheckpointRecord) -> None:
        """Note a checkpoint written for this turn (deferred, or written by the store itself)."""
        self.records[record.seq] = record
        self.touched.add(record.seq)

    def in_flight_up_to(self, seq: int) -> list[CheckpointRecord]:
        """Checkpoints at or before ``seq`` that have no outcome yet."""
        return [cp for s, cp in self.records.items() if s <= seq and cp.status in IN_FLIGHT]

    # -- records -------------------------------------------------------------
    def recorded(self, seq: int, name: str, kind: str, output: Any) -> CheckpointWrite:
        """A value recorded once and replayed after (``now``, ``uuid``, ``side_effect``...)."""
        now = self.clock.now()
        rec = CheckpointRecord(
            seq=seq, name=name, kind=kind, status=COMPLETED, output=output, started_at=now, finished_at=now
        )
        return CheckpointWrite(rec, create=True)

    def pending(self, seq: int, name: str, kind: str, *, create: bool = True, **fields: Any) -> CheckpointWrite:
        """An operation that waits (a timer, a signal, a child, a retry); ``started_at`` defaults to now."""
        if "started_at" not in fields and "enqueued_at" not in fields:
            fields["started_at"] = self.clock.now()
        rec = CheckpointRecord(seq=seq, name=name, kind=kind, status=PENDING, **fields)
        return CheckpointWrite(rec, create=create, expect=ONLY_PENDING)

    def completed(
        self,
        seq: int,
        name: str,
        kind: str,
        *,
        create: bool = False,
        expect: tuple[str, ...] = ONLY_PENDING,
        **fields: Any,
    ) -> CheckpointWrite:
        """An operation's success; ``finished_at`` defaults to now."""
        return self._settled(seq, name, kind, COMPLETED, create, expect, fields)

    def failed(
        self,
        seq: int,
        name: str,
        kind: str,
        error: dict[str, Any],
        *,
        create: bool = False,
        expect: tuple[str, ...] = ONLY_PENDING,
        **fields: Any,
    ) -> CheckpointWrite:
        """An operation's failure with ``error``; ``finished_at`` defaults to now."""
        return self._settled(seq, name, kind, FAILED, create, expect, {"error": error, **fields})

    def _settled(
        self, seq: int, name: str, kind: str, status: str, create: bool, expect: tuple[str, ...], fields: dict[str, Any]
    ) -> CheckpointWrite:
        if "finished_at" not in fields:
            fields["finished_at"] = self.clock.now()
        rec = CheckpointRecord(seq=seq, name=name, kind=kind, status=status, **fields)
        return CheckpointWrite(rec, create=create, expect=expect)

    def step_record(
        self, seq: int, name: str, status: str, *, create: bool, claimed_by: str | None = None, **fields: Any
    ) -> CheckpointWrite:
        """A dispatched step's checkpoint as the turn writes it (pending, claimed here, or settled here).

        ``claimed_by``: an update settling a step this process claimed; the
        commit is refused unless the claim still holds.
        """
        rec = CheckpointRecord(seq=seq, name=name, kind=CheckpointKind.STEP, status=status, **fields)
        expect: tuple[str, ...] = (RUNNING,) if claimed_by is not None else ()
        return CheckpointWrite(rec, create=create, expect=expect, claimed_by=claimed_by)

    def event_taken(self, seq: int, name: str, output: Any) -> CheckpointRecord:
        """The checkpoint the store wrote when it handed this turn a buffered event."""
        return CheckpointRecord(seq=seq, name=name, kind=CheckpointKind.EVENT, status=COMPLETED, output=output)
