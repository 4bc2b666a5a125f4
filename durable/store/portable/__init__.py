"""The portable store: :class:`durable.engine.ports.Store` on the Django ORM (SQLite and any other database).

Its parts are mixins by family of rows (commits, histories, runs, steps,
events, due work, fleet). Each write that has a plan
(:mod:`durable.engine.plan`) executes that plan; the PostgreSQL store
(:mod:`durable.store.postgres`) subclasses this one and executes the same
plans as single statements.
"""

from __future__ import annotations

from durable.store.portable.authoring_rows import AuthoringRows
from durable.store.portable.commits import CommitRows
from durable.store.portable.due_work import DueWork
from durable.store.portable.entity_rows import EntityRows
from durable.store.portable.event_rows import EventRows
from durable.store.portable.fleet_rows import FleetRows
from durable.store.portable.histories import HistoryRows
from durable.store.portable.queue_rows import QueueRows
from durable.store.portable.retention_rows import RetentionRows
from durable.store.portable.run_reads import RunReads
from durable.store.portable.run_rows import RunRows
from durable.store.portable.schedule_rows import ScheduleRows
from durable.store.portable.singleton_rows import SingletonRows
from durable.store.portable.step_rows import StepRows


class PortableStore(
    AuthoringRows,
    ScheduleRows,
    RunRows,
    RunReads,
    HistoryRows,
    CommitRows,
    StepRows,
    EventRows,
    DueWork,
    FleetRows,
    RetentionRows,
    SingletonRows,
    QueueRows,
    EntityRows,
):
    """:class:`durable.engine.ports.Store` on the Django ORM; see :mod:`durable.store`."""


__all__ = ["PortableStore"]
