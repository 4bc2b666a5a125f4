"""Admission to a singleton key, decided once: pure functions from what the key holds to row changes.

A store reads a key's state under the key's slot lock (its
``SingletonSlot`` row, or the memory store's lock): how many runs of the key
hold a slot (``SLOT_HOLDING`` statuses), how many wait (``queued``), and the
last queue position given out. These functions decide what to write; the
store writes it in the same transaction, so two admissions of one key never
interleave and the limit holds across processes.

Guarantees, whoever executes the plans:

* A key never has more than ``limit`` runs holding a slot because of an
  admission (a run started before its workflow became a singleton, or with
  a higher limit, is counted but not stopped).
* Waiting runs are admitted in queue order (``singleton_seq``), and a new
  run never overtakes a waiting one: it queues behind them even when a slot
  is free (the free slot then goes to the head of the queue).
* A refusal (:class:`~durable.QueueFull`) is decided before anything is
  written.
* An admitted run becomes ``pending`` with a due-now wake (``wake_at = now``,
  never cleared), so any sweep or dispatch takes it at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable.engine.vocab import RunStatus
from durable.exceptions import QueueFull


@dataclass(frozen=True)
class KeyState:
    """One singleton key as read under its slot lock."""

    holders: int
    waiting: int
    tail: int


@dataclass(frozen=True)
class AdmissionPlan:
    """What admitting one new run to its key writes.

    The new run is inserted with ``status`` at queue position ``seq`` (the
    slot's new tail) and, when queued, ``reason`` in its ``error`` column
    (what it waits for); the ``promote`` oldest waiting runs are admitted
    first (a slot freed while nobody handed it over).
    """

    status: RunStatus
    seq: int
    promote: int
    reason: dict[str, Any] | None


def waiting_reason(workflow: str, key: str, limit: int) -> dict[str, Any]:
    """The ``error`` column of a queued run: what it waits for (cleared when it is admitted)."""
    return {
        "message": f"waiting for singleton key {key!r} of workflow {workflow!r} (at most {limit} at a time)",
        "code": "singleton_queued",
        "retryable": True,
        "type": "Queued",
        "traceback": None,
    }


def plan_admission(workflow: str, key: str, limit: int, max_queue_depth: int | None, state: KeyState) -> AdmissionPlan:
    """Admit a new run of ``key``: pending if a slot is free and nobody waits, else queued.

    Raises :class:`~durable.QueueFull` when ``max_queue_depth`` is set and the
    key's holders plus waiters already reach ``limit + max_queue_depth``.
    """
    if max_queue_depth is not None and state.holders + state.waiting >= limit + max_queue_depth:
        raise QueueFull(workflow, key, limit, max_queue_depth)
    promote = plan_hand_over(limit, state.holders, state.waiting)
    if state.holders + promote < limit:
        return AdmissionPlan(RunStatus.PENDING, state.tail + 1, promote, None)
    return AdmissionPlan(RunStatus.QUEUED, state.tail + 1, promote, waiting_reason(workflow, key, limit))


def plan_hand_over(limit: int, holders: int, waiting: int) -> int:
    """How many of the oldest waiting runs a key admits now (its free slots, at most those waiting)."""
    return max(min(limit - holders, waiting), 0)


def admitted_columns(now: datetime) -> dict[str, Any]:
    """The columns a waiting run's admission writes (from ``queued`` only)."""
    return {"status": RunStatus.PENDING, "wake_at": now, "error": None, "updated_at": now}
