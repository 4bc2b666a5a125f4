"""Step queue limits, decided once: what a queue allows and which waiting steps it admits next (pure).

A queue declared in ``DURABLE["QUEUES"]`` is *limited*: its dispatched steps
are written ``waiting`` and reach a worker only once admitted. Admission is
the one place where slots are handed out; every store executes the same
:class:`QueueAdmissionPlan` under a lock on the queue's row, so admitters in any
number of processes hand out each slot once. Nothing here touches a
database.

The slots are rows, not counters: a step holds one while its checkpoint is
``admitted``, unsettled, its lease (``wake_at``: the admission's, then the
execution's, renewed by its worker) has not lapsed, and its run is active.
So a slot frees when the step's result is recorded, when its lease lapses
(its worker died) or when its run is cancelled, with nothing else to undo.

Admission order when saturated (:func:`fair_order`): higher run priority
first, then round robin across keys (each key's first waiting step before
any key's second, the key served longest ago first), then arrival order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from durable.engine.vocab import ACTIVE, Admission, CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidInput

LIMIT_NAMES: tuple[str, ...] = ("concurrency", "rate", "key_concurrency")
RATE_UNITS: dict[str, float] = {"s": 1.0, "m": 60.0, "h": 3600.0}
# How far ahead a rate-limited start may be granted: an admitter that runs late by less
# than this loses no start (the grants stay one interval apart), and a changed rate
# applies to starts granted after it.
RATE_LOOKAHEAD = timedelta(seconds=2)
# The fewest granted, unstarted steps for which a step's result leaves its slot (QueueSeen.leaves_slot).
LEAVE_SLOT_MIN = 2
# ... and the share of the concurrency it takes: a quarter, rounded up (leave_threshold; the same
# parts make the threshold of a step result's short read on PostgreSQL, durable.store.queue_statements).
LEAVE_SLOT_SHARE = 4
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([smh])\s*$")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts per ``period`` seconds, spaced evenly (no burst credit)."""

    count: int
    period: float

    @property
    def interval(self) -> timedelta:
        return timedelta(seconds=self.period / self.count)

    def __str__(self) -> str:
        unit = next(u for u, seconds in RATE_UNITS.items() if seconds == self.period)
        return f"{self.count}/{unit}"


def parse_rate(value: Any, where: str) -> Rate | None:
    """``"20/s"``, ``"100/m"``, ``"5000/h"`` (or None: no rate limit); InvalidInput otherwise."""
    if value is None:
        return None
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise InvalidInput(f"{where}: rate must be a string like '20/s', '100/m' or '5000/h', got {value!r}")
    return Rate(int(match.group(1)), RATE_UNITS[match.group(2)])


def _positive(value: Any, where: str, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{where}: {name} must be a positive integer or None, got {value!r}")
    return value


def leave_threshold(concurrency: int) -> int:
    """The fewest granted, unstarted steps of a queue of ``concurrency`` for which a result leaves its slot.

    A quarter of the slots, rounded up, and never fewer than :data:`LEAVE_SLOT_MIN`
    (:meth:`QueueSeen.leaves_slot`, :class:`~durable.engine.grants_here.GrantsHere`).
    """
    return max(LEAVE_SLOT_MIN, -(-concurrency // LEAVE_SLOT_SHARE))


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits (None: that limit is off). See ``DURABLE["QUEUES"]``."""

    concurrency: int | None = None
    rate: Rate | None = None
    key_concurrency: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "rate": str(self.rate) if self.rate is not None else None,
            "key_concurrency": self.key_concurrency,
        }


def parse_limits(raw: Any, where: str) -> QueueLimits:
    """A queue's limits from a dict with any of :data:`LIMIT_NAMES`; InvalidInput names every problem."""
    return apply_overrides(QueueLimits(), raw, where)


def apply_overrides(base: QueueLimits, raw: Any, where: str) -> QueueLimits:
    """``base`` with the limits ``raw`` names replaced (a None value turns that limit off)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be a dict of {', '.join(LIMIT_NAMES)}, got {raw!r}")
    unknown = sorted(set(map(str, raw)) - set(LIMIT_NAMES))
    if unknown:
        raise InvalidInput(f"{where} has unknown limit(s) {unknown}; known: {list(LIMIT_NAMES)}")
    found: dict[str, Any] = {}
    for name in ("concurrency", "key_concurrency"):
        if name in raw:
            found[name] = _positive(raw[name], where, name)
    if "rate" in raw:
        found["rate"] = parse_rate(raw["rate"], where)
    return replace(base, **found)


def effective_limits(defaults: QueueLimits, overrides: Mapping[str, Any]) -> QueueLimits:
    """The limits in force: the settings' ``defaults`` with the stored ``overrides`` winning.

    Overrides were validated when stored; one that no longer parses is ignored
    rather than stopping the queue.
    """
    try:
        return apply_overrides(defaults, overrides, "stored queue limits")
    except InvalidInput:
        return defaults


@dataclass(frozen=True)
class Candidate:
    """A waiting step as admission sees it (``served``: when its key was last admitted)."""

    id: Any
    run_id: str
    seq: int
    key: str | None
    priority: int
    enqueued_at: datetime | None
    rank: int = 1
    served: datetime | None = None


@dataclass(frozen=True)
class Grant:
    """Step ``(run_id, seq)`` (row ``id``) may start at ``start``; its slot is held until ``until`` unless claimed."""

    id: Any
    run_id: str
    seq: int
    start: datetime
    until: datetime
    key: str | None = None


def unkeyed_served(last: datetime | None, grants: Iterable[Grant]) -> datetime | None:
    """When a step without a key was last admitted, after ``grants`` (the queue row keeps it for the round robin)."""
    starts = [grant.start for grant in grants if grant.key is None]
    if last is not None:
        starts.append(last)
    return max(starts, default=None)


@dataclass(frozen=True)
class QueueAdmitted:
    """What one admission did: the steps granted a slot (to dispatch after commit), whether the queue is paused."""

    queue: str
    grants: tuple[Grant, ...] = ()
    paused: bool = False


@dataclass(frozen=True)
class QueueSeen:
    """A queue as a store read it at a plan's ``now`` without its lock: enough to choose grants.

    Read by the statement that wrote a step's result (:class:`AdmissionRead`),
    so with that step's slot already free. ``version`` is the queue row's as
    read: the grants chosen from this are written only while the row is still
    at it (every grant rewrites the row), else the admission reads again under
    the lock. ``wanted``: the room the store computed (the plan's own is
    checked against it); ``candidates``: as :meth:`QueueAdmissionPlan.choose`
    takes them, empty when nothing waits, the queue is full or paused.
    """

    version: str
    paused: bool
    overrides: Mapping[str, Any]
    rate_next_at: datetime | None
    held_by_key: Mapping[str | None, int]
    wanted: int
    candidates: tuple[Candidate, ...]
    # The row as locked was the row as of the read's snapshot: no admission and no write of
    # waiting steps committed in between (durable.store.queue_statements).
    fresh: bool = False
    # Slots held by steps granted but not yet claimed by a worker (see leaves_slot).
    unstarted: int = 0

    def leaves_slot(self, plan: QueueAdmissionPlan) -> bool:
        """May the result that read this leave its freed slot to a later result's admission?

        Yes while at least a quarter of the queue's concurrency (and at least
        :data:`LEAVE_SLOT_MIN`) is granted to steps no worker has started: the
        workers are behind, so granting one more step now would only queue it
        behind those. Each of them (and every running holder) frees its slot
        with a result of its own, read after it finished, so after this result
        committed unless both commits overlapped; the first result that sees
        fewer waiting to start admits every free slot in one statement. A
        holder that dies lapses, and the sweep admits what no result did (also
        in the one case where every holder finished while this result
        committed). So a busy queue is granted one statement per batch instead
        of one per step, and a slot left so does not keep a worker waiting.
        Never for a queue without a concurrency limit, nor a paused one.
        """
        limits = effective_limits(plan.defaults, self.overrides)
        if limits.concurrency is None or self.paused:
            return False
        return self.unstarted >= leave_threshold(limits.concurrency)

    def nothing_waits(self, plan: QueueAdmissionPlan) -> bool:
        """Does this read prove that no step waits for the slot it saw freed?

        Only a fresh read of an unpaused queue with room (the same room
        ``plan`` computes from the limits as read) that found no candidate.
        Anything else (a full queue, a pause, a stale or unparsable read)
        leaves the question to an admission under the lock.
        """
        if not self.fresh or self.paused or self.candidates or self.wanted <= 0:
            return False
        held = sum(self.held_by_key.values())
        return plan.wanted(effective_limits(plan.defaults, self.overrides), held) == self.wanted


class AdmissionRead:
    """A step result's write asked to read its queue too, for ``plan`` (a store that can fills ``seen``).

    A store that cannot, or a write that did not settle the step, leaves
    ``seen`` None: the admission then reads under the queue row's lock as
    usual. ``count_only``: the queue is busy (its last result here left its
    slot), so only what :meth:`QueueSeen.leaves_slot` needs is read; a
    ``seen`` so read has no candidates and is never fresh, so a result that
    does not leave its slot admits with reads of its own.
    """

    def __init__(self, plan: QueueAdmissionPlan, count_only: bool = False) -> None:
        self.plan = plan
        self.count_only = count_only
        self.seen: QueueSeen | None = None


@dataclass(frozen=True)
class QueueAdmissionPlan:
    """Admit waiting steps of ``queue`` at ``now``, at most ``batch`` of them.

    Executed under the queue row's lock (created with no overrides if
    missing); grants chosen from a :class:`QueueSeen` read before the lock
    are written only if the row has not changed since (every grant rewrites
    it). Conditions on the rows: slot holders are checkpoints of kind
    ``step`` in ``queue`` with admission ``admitted``, status in ``open``,
    ``wake_at`` after ``now`` and their run's status in ``run_statuses``;
    candidates are ``pending`` ones of active runs, ``waiting`` (or admitted
    with a lapsed lease), whose retry is due. A grant writes admission
    ``admitted``, ``admitted_at = start`` and ``wake_at = start + lease``.
    """

    queue: str
    now: datetime
    defaults: QueueLimits
    lease: timedelta
    batch: int
    kind: CheckpointKind = CheckpointKind.STEP
    open: tuple[CheckpointStatus, ...] = (CheckpointStatus.PENDING, CheckpointStatus.RUNNING)
    run_statuses: tuple[RunStatus, ...] = ACTIVE
    waiting: Admission = Admission.WAITING
    admitted: Admission = Admission.ADMITTED

    def wanted(self, limits: QueueLimits, held: int) -> int:
        """How many grants this call may make at most (before keys and rate), given ``held`` slots in use."""
        free = self.batch
        if limits.concurrency is not None:
            free = min(free, limits.concurrency - held)
        return max(free, 0)

    def choose(
        self,
        limits: QueueLimits,
        held: int,
        held_by_key: Mapping[str | None, int],
        candidates: Sequence[Candidate],
        rate_next_at: datetime | None,
    ) -> tuple[tuple[Grant, ...], datetime | None]:
        """The grants, taken from ``candidates`` in :func:`fair_order`, and the rate's next free start.

        ``held``: slots in use; ``held_by_key``: those of the candidates' keys
        (needed with ``key_concurrency`` only). Keys at ``key_concurrency`` are
        skipped (a step without a key has no per-key limit); with a rate, each
        grant starts one interval after the previous one (never before
        ``now``), up to :data:`RATE_LOOKAHEAD` ahead.
        """
        per_key = dict(held_by_key)
        grants: list[Grant] = []
        room = self.wanted(limits, held)
        start = self.now
        if limits.rate is not None and rate_next_at is not None:
            start = max(start, rate_next_at)
        for cand in fair_order(candidates):
            if len(grants) >= room:
                break
            if limits.rate is not None and start >= self.now + RATE_LOOKAHEAD:
                break
            if cand.key is not None and limits.key_concurrency is not None:
                if per_key.get(cand.key, 0) >= limits.key_concurrency:
                    continue
            per_key[cand.key] = per_key.get(cand.key, 0) + 1
            grants.append(Grant(cand.id, cand.run_id, cand.seq, start, start + self.lease, cand.key))
            if limits.rate is not None:
                start += limits.rate.interval
        next_at = start if limits.rate is not None and grants else rate_next_at
        return tuple(grants), next_at


def plan_queue_admission(
    queue: str, now: datetime, defaults: QueueLimits, lease: float, batch: int
) -> QueueAdmissionPlan:
    return QueueAdmissionPlan(queue, now, defaults, timedelta(seconds=lease), batch)


def fair_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Admission order: priority (higher first), then rank within the key, the key served longest ago, arrival.

    ``rank`` is a step's place among its key's waiting steps of the same
    priority (1: its oldest), so each key's first step comes before any
    key's second: one hot key cannot starve the others.
    """

    def order(c: Candidate) -> tuple[Any, ...]:
        served = c.served.timestamp() if c.served is not None else float("-inf")
        arrived = c.enqueued_at.timestamp() if c.enqueued_at is not None else float("-inf")
        return (-c.priority, c.rank, served, arrived, str(c.id))

    return sorted(candidates, key=order)


def rank_within_keys(rows: Iterable[Candidate]) -> list[Candidate]:
    """``rows`` with their :attr:`Candidate.rank` (stores without window functions: the memory store)."""
    seen: dict[tuple[int, str | None], int] = {}
    ranked = []
    ordered = sorted(rows, key=lambda c: (c.enqueued_at.timestamp() if c.enqueued_at else float("-inf"), str(c.id)))
    for cand in ordered:
        group = (cand.priority, cand.key)
        seen[group] = seen.get(group, 0) + 1
        ranked.append(replace(cand, rank=seen[group]))
    return ranked


def step_key(key: Any, where: str) -> str | None:
    """A step's queue key as stored: a string (a number is taken as its text), or None; InvalidInput otherwise."""
    if key is None:
        return None
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise InvalidInput(f"{where}: a queue key must be a string or an integer, got {key!r}")
    text = str(key)
    if len(text) > 255:
        raise InvalidInput(f"{where}: a queue key is at most 255 characters")
    return text


def wait_reason(queue: str, paused: bool, limits: QueueLimits, held: int, key_held: int) -> str:
    """Why a waiting step of ``queue`` is not admitted yet, in words (admin, API, ``durable_run``)."""
    if paused:
        return f"queue {queue!r} is paused"
    if limits.concurrency is not None and held >= limits.concurrency:
        return f"queue {queue!r} is at its concurrency limit ({held} of {limits.concurrency} running)"
    if limits.key_concurrency is not None and key_held >= limits.key_concurrency:
        return f"its key is at the key_concurrency limit of queue {queue!r} ({limits.key_concurrency})"
    if limits.rate is not None:
        return f"queue {queue!r} admits {limits.rate} (rate limit)"
    return f"waiting for admission to queue {queue!r}"


def claimable(admission: str | None, admitted_at: datetime | None, wake_at: datetime | None, now: datetime) -> bool:
    """May a worker claim this pending step now? Steps of other queues: yes. A limited queue's: only
    while admitted, its granted start reached and its admission's lease not lapsed."""
    if admission is None:
        return True
    if admission != Admission.ADMITTED or admitted_at is None or wake_at is None:
        return False
    return admitted_at <= now < wake_at
