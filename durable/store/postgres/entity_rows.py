"""Entities on PostgreSQL: the wait for an entity's row lock bounded by ``lock_timeout``.

The portable write (:mod:`durable.store.portable.entity_rows`) is kept; only
the lock differs. ``SET LOCAL lock_timeout`` bounds the insert of a new
entity's row (a racing first insert holds its unique index entry) and the
``SELECT ... FOR UPDATE``; the previous value is put back once the row is
locked, so a transaction around the call (a workflow turn's) keeps its own.
Past the timeout PostgreSQL raises ``lock_not_available`` (SQLSTATE 55P03),
the savepoint or transaction rolls back and nothing is written.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from datetime import datetime

from django.db import OperationalError, connection

from durable.engine.plan_entities import EntityCall
from durable.models import Entity
from durable.store.portable.entity_rows import EntityRows

LOCK_NOT_AVAILABLE = "55P03"


class PostgresEntities(EntityRows):
    def _entity_wait(self, timeout: float | None) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def _lock_entity(self, call: EntityCall, now: datetime) -> Entity:
        if call.timeout is None:
            return super()._lock_entity(call, now)
        # In the call's own transaction the setting ends with it; in a caller's, it is put back.
        nested = bool(connection.savepoint_ids)
        with connection.cursor() as cursor:
            if nested:
                cursor.execute("SELECT current_setting('lock_timeout')")
                previous = cursor.fetchone()[0]
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{max(int(call.timeout * 1000), 1)}ms"])
        entity = super()._lock_entity(call, now)
        if nested:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])
        return entity

    def _lock_timed_out(self, exc: OperationalError) -> bool:
        return getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE
