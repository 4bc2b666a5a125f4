"""What every part of the client shares: its engine, and how a new run is created and announced."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import transaction

from durable.engine import observe
from durable.engine.core import Engine

logger = logging.getLogger("durable.client")


def ring(announce: Callable[[], None]) -> None:
    """Announce work through the transport; a broker error is logged, never raised.

    Called once the tables already hold the work (a pending run, a run woken
    with ``wake_at`` now), so a failed announcement only leaves it to the next
    sweep. Raising would tell a caller whose write has committed that it did
    not happen: a retried signal would then be delivered twice.
    """
    try:
        announce()
    except Exception:  # the broker is a doorbell: the sweeps deliver what it dropped
        logger.warning("announcing through the transport failed; the sweeps will take the work up", exc_info=True)


def after_commit(announce: Callable[[], None]) -> None:
    """:func:`ring` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: ring(announce))


class ClientBase:
    """A client's engine and the writes its operations share. Holds no other state (thread-safe)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _traced_create(self, fields: dict[str, Any]) -> bool:
        """:meth:`_create` under a ``durable.start`` span, whose context the run keeps for its later spans."""
        observer = self.engine.observer
        if not observer.enabled:
            return self._create(fields)
        attributes = {"run_id": fields["id"], "workflow": fields["workflow"], "version": fields["version"]}
        span = observer.begin(observe.START, attributes)
        fields["trace_context"] = span.context()
        try:
            created = self._create(fields)
        except BaseException as exc:
            span.fail(exc)
            span.end("error")
            raise
        span.end("started" if created else "exists")
        return created

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
                    after_commit(lambda: engine.transport.dispatch_turn(run_id))
            return created
        if not engine.transport.takes_leased_runs():
            created = engine.store.create_run(fields)
            if created:
                ring(lambda: engine.transport.dispatch_turn(run_id))
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

            after_commit(dispatch)
