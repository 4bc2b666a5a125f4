"""This process's cache of suspended runs' histories: a resumed turn reads only what changed.

A turn replays its workflow from the start against the run's checkpoints.
Reading all of them each turn makes a turn cost O(history); after a turn of
this process suspends a run, the cache keeps the checkpoints that turn saw
settled, and the run's next turn here reads only the rest: the positions that
were in flight or that the turn wrote, and any past the last one it knew
(:meth:`Store.load_delta`, one statement).

Correctness rests on who may change a run's checkpoints. A settled checkpoint
(completed or failed) is rewritten only under the run's lease, and every
lease (an acquire, a claimed page, a step result that takes the lease, an
orphan recovery) counts a turn (``RunRecord.turns``); outside a lease,
writers (step results and claims, callbacks, breakpoints, events, queue
admission, re-dispatch) touch only checkpoints still in flight, which are
read again anyway. The one writer that deletes settled checkpoints without a
lease is a requeue of a failed run, which the count of the run's checkpoints
shows. So an entry is used only when all of this holds, and any doubt means
a full read of the history:

* it was written by this process's owner id, after a final commit that
  suspended the run, for the run with the same ``created_at`` (a run deleted
  and started again under the same id is another run);
* the run's lease was taken exactly once since (``turns`` is the entry's
  plus one): no other lease holder (another process, or a lease of ours that
  was lost) ran a turn in between;
* no cancel or timeout is asking the run to stop (``cancel_requested``);
* the run has as many checkpoints as the entry's settled ones plus those read.

An entry is taken out when a turn of its run begins, hit or miss, and put
back only by that turn's successful final commit: a turn that fails, loses
its lease or ends the run leaves none. Bounded by entries (``size``), by
checkpoints held in all (``checkpoints``) and by idle time (``idle`` seconds
since the entry was written): the least recently written entries go first.
Thread-safe: one lock guards the map; the reads run outside it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from durable.engine.history import History
from durable.engine.ports import CheckpointRecord, RunRecord, Store
from durable.engine.vocab import SETTLED

if TYPE_CHECKING:
    from durable.engine.resident import Parked


@dataclass(frozen=True)
class Entry:
    """What a turn that suspended a run left for the run's next turn here.

    ``stable``: the checkpoints it saw settled and did not write, as read
    (never handed to user code); ``unsure``: every other position it knew
    (in flight, or written by the turn), to read again; ``after``: the
    highest position it knew; ``last_stable``: the highest of ``stable``.
    """

    owner: str
    created_at: datetime
    turns: int
    stable: dict[int, CheckpointRecord]
    unsure: tuple[int, ...]
    after: int
    last_stable: int
    written_at: datetime
    # The run's workflow, parked by that turn (durable.engine.resident); None: the next turn replays.
    parked: Parked | None = None

    def serves(self, run: RunRecord, owner: str) -> bool:
        """May the turn of ``run`` (leased to ``owner``) start from this entry?"""
        return (
            owner == self.owner
            and run.created_at == self.created_at
            and run.turns == self.turns + 1
            and not run.cancel_requested
        )


class HistoryCache:
    """Entries by run id, least recently written first. ``size`` 0 turns the cache off."""

    def __init__(self, size: int = 0, idle: float = 300.0, checkpoints: int = 200_000) -> None:
        self.size = size
        self.idle = timedelta(seconds=idle)
        self.checkpoints = checkpoints
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held(self) -> int:
        """Checkpoints held by all entries."""
        return self._held

    def take(self, run_id: str, now: datetime) -> Entry | None:
        """Remove and return the run's entry (None: none, or idle too long)."""
        with self._lock:
            entry = self._entries.pop(run_id, None)
            if entry is not None:
                self._held -= len(entry.stable)
        if entry is None:
            return None
        if now - entry.written_at > self.idle:
            if entry.parked is not None:
                entry.parked.end()
            return None
        return entry

    def serves(self, run: RunRecord, owner: str, now: datetime, holding: int = 0) -> bool:
        """Would the turn of ``run`` start from an entry (a sweep then does not read its history)?

        ``holding``: only an entry that keeps at least that many settled
        checkpoints counts (below it, reading the whole history with others
        is cheaper than a statement of its own for the changes).
        """
        entry = self._entries.get(run.id)
        return (
            entry is not None
            and len(entry.stable) >= holding
            and now - entry.written_at <= self.idle
            and entry.serves(run, owner)
        )

    def keep(self, run: RunRecord, owner: str, history: History, now: datetime, parked: Parked | None = None) -> None:
        """Keep what the turn of ``run`` that just suspended it saw, and its ``parked`` workflow, for its next turn.

        A parked workflow that no entry keeps (the cache is off or full, or an
        entry of a later turn is kept instead) is ended.
        """
        stable = _stable(history) if self.size else {}
        if not self.size or len(stable) > self.checkpoints:
            if parked is not None:
                parked.end()
            return
        known = history.records.keys()
        unsure = tuple(sorted(known - stable.keys()))
        last = max(stable, default=0)
        entry = Entry(owner, run.created_at, run.turns, stable, unsure, max(known, default=0), last, now, parked)
        with self._lock:
            dropped = self._entries.pop(run.id, None)
            if dropped is not None:
                self._held -= len(dropped.stable)
                if dropped.turns > entry.turns:
                    # A later turn of the run (another thread of ours) already left its entry.
                    entry, dropped = dropped, entry
            self._entries[run.id] = entry
            self._held += len(entry.stable)
            evicted = self._evict(now)
        # Outside the lock: ending a parked workflow runs its frames' unwinding.
        for gone in [dropped, *evicted]:
            if gone is not None and gone.parked is not None:
                gone.parked.end()

    def _evict(self, now: datetime) -> list[Entry]:
        """Drop the least recently written entries past a bound, and every idle one at the front (locked)."""
        entries = self._entries
        evicted = []
        while entries:
            run_id, oldest = next(iter(entries.items()))
            if len(entries) <= self.size and self._held <= self.checkpoints and now - oldest.written_at <= self.idle:
                break
            del entries[run_id]
            self._held -= len(oldest.stable)
            evicted.append(oldest)
        return evicted

    def clear(self) -> None:
        """Forget every entry (a parked workflow is dropped: ended by greenlet in its own thread)."""
        with self._lock:
            self._entries.clear()
            self._held = 0


Restored = tuple[dict[int, CheckpointRecord], dict[int, CheckpointRecord], dict[int, CheckpointRecord]]


def _stable(history: History) -> dict[int, CheckpointRecord]:
    """The settled records ``history`` was loaded with and its turn did not write (from the entry it
    started from and the records read since, when it had one: the same, without a pass over every record)."""
    if history.kept is None:
        return {seq: cp for seq, cp in history.loaded.items() if cp.status in SETTLED and seq not in history.touched}
    stable = dict(history.kept)
    for seq, cp in history.fresh.items():
        if cp.status in SETTLED:
            stable[seq] = cp
        else:
            stable.pop(seq, None)
    for seq in history.touched:
        stable.pop(seq, None)
    return stable


def restore(entry: Entry | None, store: Store, run: RunRecord, owner: str) -> Restored | None:
    """The history of ``run`` from ``entry`` and what changed since, or None to read it all.

    Returns the whole history, the entry's records in it and the records read
    now (:class:`History`'s ``kept`` and ``fresh``). Called by the turn
    holding the run's lease, after :meth:`HistoryCache.take`.
    """
    if entry is None or not entry.serves(run, owner):
        return None
    delta = store.load_delta(run.id, list(entry.unsure), entry.after)
    if delta.total != len(entry.stable) + len(delta.records):
        # A checkpoint the entry holds is gone (a requeue dropped it), or one it never knew appeared.
        return None
    records = dict(entry.stable)
    records.update(delta.records)
    if delta.records and min(delta.records) < entry.last_stable:
        # Positions read again sit between the kept ones: keep the history in position order.
        records = dict(sorted(records.items()))
    return records, entry.stable, delta.records
