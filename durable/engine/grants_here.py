"""Steps of limited queues that this engine granted and queued on its own threads, not begun yet.

Admission may leave a freed slot to a later result while granted steps
wait to start (:meth:`~durable.engine.plan_queues.QueueSeen.leaves_slot`
says so from a read of the database). A process that queued those steps on
its own threads knows it without reading: each of them, once begun, ends in
a result of this process that asks for the next admission itself. So a
result here that finds enough of them queued admits nothing and reads
nothing (:func:`durable.engine.admission.after_result`).

Nothing here counts a limit: the database holds every slot. An entry only
makes an admission wait for a later one; it lapses at its grant's admission
lease (``until``), so an entry whose step never begins here (the pool was
shut down, the message was dropped) stops counting once the database would
admit that step again anyway, and the sweep admits what no result did.
"""

from __future__ import annotations

import threading
from datetime import datetime


class GrantsHere:
    """Granted steps queued in this process, by (run id, seq), with their queue and admission lease.

    Thread-safe: :meth:`add` is called by an admitting thread before it
    queues the step, :meth:`begin` by the thread that begins running it, so
    a step can never begin before its entry exists.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[str, int], tuple[str, datetime]] = {}
        self._counts: dict[str, int] = {}  # entries by queue: asked of every result, kept as they change
        self._next_lapse: datetime | None = None  # no entry lapses before it (None: no entry)

    def add(self, queue: str, run_id: str, seq: int, until: datetime) -> None:
        """Step ``seq`` of ``run_id`` was granted in ``queue`` until ``until`` and is about to be queued here."""
        with self._lock:
            self._drop((run_id, seq))
            self._steps[(run_id, seq)] = (queue, until)
            self._counts[queue] = self._counts.get(queue, 0) + 1
            if self._next_lapse is None or until < self._next_lapse:
                self._next_lapse = until

    def begin(self, run_id: str, seq: int) -> None:
        """The step begins here (or was not queued after all): it no longer counts."""
        if not self._steps:
            return  # the common case, read without the lock: an entry is added before its step is queued
        with self._lock:
            self._drop((run_id, seq))

    def queued(self, queue: str, now: datetime) -> int:
        """How many granted steps of ``queue`` wait here to begin (entries lapsed by ``now`` are dropped)."""
        if not self._steps:
            return 0
        with self._lock:
            if self._next_lapse is not None and self._next_lapse <= now:
                for step in [step for step, (_, until) in self._steps.items() if until <= now]:
                    self._drop(step)
                self._next_lapse = min((until for _, until in self._steps.values()), default=None)
            return self._counts.get(queue, 0)

    def _drop(self, step: tuple[str, int]) -> None:
        """Forget ``step`` if it is here (under the lock); a lapse bound it set stays a safe lower bound."""
        entry = self._steps.pop(step, None)
        if entry is not None:
            self._counts[entry[0]] -= 1
