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

from durable.store.events import EventsStore
from durable.store.runs import RunsStore
from durable.store.steps import StepsStore
from durable.store.sweeps import SweepsStore
from durable.store.turns import TurnsStore


class DjangoStore(RunsStore, TurnsStore, StepsStore, EventsStore, SweepsStore):
    """:class:`durable.engine.ports.Store` on the Django ORM."""


store = DjangoStore()

__all__ = ["DjangoStore", "store"]
