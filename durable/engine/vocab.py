"""The engine's vocabulary: statuses, kinds and results, as string enums.

Every layer (engine, store, dashboard) names statuses and kinds through these
enums, never through bare string literals. Their values are the strings
stored in the database, so a member compares equal to the stored text and
serialises to JSON as it.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run stands. ``failed`` and ``dead`` can be requeued; ``completed`` and ``cancelled`` are final.

    ``queued``: a run of a singleton workflow waiting for a slot of its key
    (created, not started; admitted in FIFO order when a slot frees).
    """

    QUEUED = "queued"
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD = "dead"


TERMINAL: tuple[RunStatus, ...] = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.DEAD)
# Statuses of a run that holds a slot of its singleton key (queued runs wait for one).
SLOT_HOLDING: tuple[RunStatus, ...] = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.BLOCKED)
ACTIVE: tuple[RunStatus, ...] = (RunStatus.QUEUED, *SLOT_HOLDING)


class CheckpointStatus(StrEnum):
    """Where one durable operation stands; ``completed`` and ``failed`` are settled, and a settled one always wins."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


SETTLED: tuple[CheckpointStatus, ...] = (CheckpointStatus.COMPLETED, CheckpointStatus.FAILED)
UNSETTLED: tuple[CheckpointStatus, ...] = (CheckpointStatus.PENDING, CheckpointStatus.RUNNING)


class CheckpointKind(StrEnum):
    """What a checkpoint records: the ``ctx`` operation that took its position."""

    STEP = "step"
    LOCAL = "local"
    SLEEP = "sleep"
    SIGNAL = "signal"
    NOW = "now"
    UUID = "uuid"
    SIDE_EFFECT = "side_effect"
    CHILD = "child"
    START_CHILD = "start_child"
    WAIT_RUN = "wait_run"
    EVENT = "event"
    UPDATE = "update"
    ATTRIBUTES = "attributes"
    TRANSACTION = "transaction"
    COMPENSATION = "compensation"
    ENTITY = "entity"
    CALLBACK = "callback"
    CALLBACK_WAIT = "callback_wait"
    BREAKPOINT = "breakpoint"


# Kinds whose pending state means the run has (or had) a waiter row.
WAIT_KINDS: tuple[CheckpointKind, ...] = (
    CheckpointKind.SIGNAL,
    CheckpointKind.UPDATE,
    CheckpointKind.EVENT,
    CheckpointKind.CHILD,
    CheckpointKind.WAIT_RUN,
    CheckpointKind.CALLBACK_WAIT,
    CheckpointKind.BREAKPOINT,
)
# Failed kinds that a requeue resets so they run again.
RESETTABLE: tuple[CheckpointKind, ...] = (
    CheckpointKind.STEP,
    CheckpointKind.LOCAL,
    CheckpointKind.CHILD,
    CheckpointKind.TRANSACTION,
)


class EntityOpStatus(StrEnum):
    """How one operation applied to an entity ended (its op log row): the handler returned, or it raised."""

    COMPLETED = "completed"
    FAILED = "failed"


class TurnResult(StrEnum):
    """How a turn ended, as :meth:`Engine.run_turn` reports it.

    The first four are the status the turn committed; ``LOST``: the lease was
    lost (cancel, takeover) and nothing was written; ``FAULT``: an
    infrastructure error abandoned the turn and the run was given back.
    """

    SUSPENDED = "suspended"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"
    FAULT = "fault"


# Token prefixes of waiters that are not user signals (user signal names cannot use them).
RUN_TOKEN = "__run__:"
EVENT_TOKEN = "__event__:"
UPDATE_TOKEN = "__update__:"
CALLBACK_TOKEN = "__callback__:"
BREAKPOINT_TOKEN = "__breakpoint__:"


class StepResult(StrEnum):
    """What :meth:`Engine.execute_step` did with one delivery of a dispatched step."""

    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    # Nothing to run: settled, in flight elsewhere, not due yet, or the run is over.
    SKIPPED = "skipped"


class Admission(StrEnum):
    """Where a dispatched step of a limited queue (``DURABLE["QUEUES"]``) stands with its queue.

    ``waiting``: not admitted yet (its checkpoint stays ``pending``); ``admitted``:
    it holds one of the queue's slots while its checkpoint is unsettled and its
    lease (``wake_at``) has not lapsed. Steps of other queues have none.
    """

    WAITING = "waiting"
    ADMITTED = "admitted"
