"""An in-memory store: :class:`durable.engine.ports.Store` without a database.

For engine unit tests and users' fast tests (like procrastinate's in-memory
connector). It keeps the database store's semantics: every status write is
compare-and-set, every write made for a lease holder checks the lease,
checkpoints are unique per ``(run, seq)``, a settled checkpoint always wins,
signals are buffered FIFO per name, events are buffered once with match.
One re-entrant lock serialises all access (thread-safe), and :meth:`atomic`
blocks are commit-or-nothing (an undo journal, with savepoints when nested).
It imports nothing from Django.

State lives in ``store.tables`` (plain dicts of rows, for inspection in tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable.store.memory.authoring import AuthoringPart
from durable.store.memory.entities import EntitiesPart
from durable.store.memory.events import EventsPart
from durable.store.memory.listing import ListingPart
from durable.store.memory.queues import QueuesPart
from durable.store.memory.retention import RetentionPart
from durable.store.memory.runs import RunsPart
from durable.store.memory.schedules import SchedulesPart
from durable.store.memory.singletons import SingletonsPart
from durable.store.memory.steps import StepsPart
from durable.store.memory.sweeps import SweepsPart
from durable.store.memory.tables import IntegrityError, Tables
from durable.store.memory.turns import TurnsPart


class MemoryStore(
    AuthoringPart,
    SchedulesPart,
    RunsPart,
    TurnsPart,
    StepsPart,
    EventsPart,
    SweepsPart,
    ListingPart,
    RetentionPart,
    SingletonsPart,
    QueuesPart,
    EntitiesPart,
):
    """:class:`durable.engine.ports.Store` in memory (see the module docstring)."""


if TYPE_CHECKING:
    from durable.engine.ports import Store

    # The type checker holds the memory store to every method of the protocol, signatures included.
    _conforms: Store = MemoryStore()

__all__ = ["IntegrityError", "MemoryStore", "Tables"]
