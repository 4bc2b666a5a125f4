"""What every part of the client shares: its engine, and how a new run is created and announced."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction

from durable.engine.core import Engine


class ClientBase:
    """A client's engine and the writes its operations share. Holds no other state (thread-safe)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _create(self, fields: dict[str, Any]) -> bool:
        """Insert a run (idempotent) and dispatch it after the caller's transaction commits.

        Outside a transaction, on a transport that runs turns in this process, the
        run is inserted already leased to this process and its first turn starts
        at once, without a separate acquire. If this process dies first, the
        lease expires and the orphan sweep takes the run, as for any turn.
        """
        engine = self.engine
        run_id = fields["id"]
        if transaction.get_connection().in_atomic_block:
            with engine.store.atomic():
                created = engine.store.create_run(fields)
                if created:
                    transaction.on_commit(lambda: engine.transport.dispatch_turn(run_id))
            return created
        if not engine.transport.takes_leased_runs():
            created = engine.store.create_run(fields)
            if created:
                engine.transport.dispatch_turn(run_id)
            return created
        now = engine.clock.now()
        run = engine.store.create_leased_run(fields, engine.owner, now, now + timedelta(seconds=engine.settings.lease))
        if run is not None:
            engine.transport.run_leased(run)
        return run is not None

    def _dispatch_after_commit(self, run_ids: list[str]) -> None:
        """Announce the turns of ``run_ids`` once the current transaction commits."""
        if run_ids:
            transport = self.engine.transport

            def dispatch() -> None:
                for rid in run_ids:
                    transport.dispatch_turn(rid)

            transaction.on_commit(dispatch)
