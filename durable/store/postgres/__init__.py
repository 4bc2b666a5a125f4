"""The PostgreSQL store: the portable store's plans executed as single prepared statements.

:class:`PostgresStore` subclasses :class:`durable.store.portable.PortableStore`
and replaces the hot path: a turn's commit (one data-modifying CTE), a page's
final commits (one statement per shape, arrays per column), the page claim
(``FOR UPDATE SKIP LOCKED``), a step's claim and result, the lease take, the
history loads, waking waiters, the advisory locks of event names and the
admission of limited queues (:mod:`durable.store.postgres.queue_rows`). The
rarer shapes run as the portable store runs them. Every statement keeps the
guarantees of the portable version it replaces (run row locked first,
compare-and-set on the lease, the engine's ``now``). All SQL text is in
:mod:`durable.store.statements` and :mod:`durable.store.queue_statements`;
the preparing cursors are the instance's.
"""

from __future__ import annotations

from durable.store.portable import PortableStore
from durable.store.postgres.commits import PostgresCommits
from durable.store.postgres.entity_rows import PostgresEntities
from durable.store.postgres.queue_rows import PostgresQueues
from durable.store.postgres.run_rows import PostgresRuns
from durable.store.postgres.schedule_rows import PostgresSchedules
from durable.store.postgres.step_rows import PostgresSteps


class PostgresStore(
    PostgresSchedules, PostgresCommits, PostgresSteps, PostgresRuns, PostgresEntities, PostgresQueues, PortableStore
):
    """:class:`durable.engine.ports.Store` on PostgreSQL; see the module docstring."""


__all__ = ["PostgresStore"]
