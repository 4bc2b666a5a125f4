"""The engine object: wiring of store, transport, settings and this process's identity."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

from durable.engine.leases import LeaseKeeper
from durable.engine.ports import CheckpointRecord, RunRecord, Store, Transport

logger = logging.getLogger("durable")


def make_owner_id() -> str:
    """Identity of this process in ``locked_by`` columns: host, pid and a random suffix."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class _AnyFleet:
    def can_serve(self, step: str, queue: str | None) -> bool:
        return True

    def subscribers(self, event: str) -> list[str]:
        return []


class Engine:
    """Runs turns and steps against a store, announcing work through a transport.

    ``settings`` is any object with the attributes of
    :class:`durable.conf.DurableSettings`. ``listeners`` are called as
    ``listener(status, run)`` after each committed turn (observability hooks).
    """

    def __init__(
        self,
        store: Store,
        transport: Transport,
        settings: Any,
        *,
        owner: str | None = None,
        keeper: LeaseKeeper | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.settings = settings
        self.owner = owner or make_owner_id()
        self.keeper = keeper or LeaseKeeper()
        self.listeners: list[Callable[[str, RunRecord], None]] = []
        # Called as listener(source_run, subscriber, outcome) after each lifecycle delivery.
        self.lifecycle_listeners: list[Callable[[RunRecord, str, str], None]] = []
        # Answers "can any live worker run this step?"; see durable.fleet.
        self.fleet: Any = _AnyFleet()
        # Step routes this process consumes (None: the default queue). A turn run here
        # claims one dispatched step on these routes in its own commit and runs it at
        # once (EAGER_STEPS); set by the Celery worker, empty elsewhere.
        self.eager_routes: frozenset[str | None] = frozenset()
        # Mean seconds a recent turn of run_turns took before its final commit (updated per
        # batch): tells the due-run sweep whether spreading a page over threads can help.
        self.turn_seconds = 0.0

    def run_turn(
        self,
        run_id: str,
        *,
        acquired: RunRecord | None = None,
        fresh: bool = False,
        history: dict[int, CheckpointRecord] | None = None,
    ) -> str | None:
        from durable.engine.turn import run_turn

        return run_turn(self, run_id, acquired=acquired, fresh=fresh, history=history)

    def run_turns(
        self,
        claimed: list[tuple[RunRecord, dict[int, CheckpointRecord]]],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> list[str | None]:
        from durable.engine.turn import run_turns

        return run_turns(self, claimed, should_stop)

    def execute_step(self, run_id: str, seq: int, *, continue_turn: bool = True) -> str:
        from durable.engine.steps import execute_step

        return execute_step(self, run_id, seq, continue_turn=continue_turn)

    def emit(self, status: str, run: RunRecord) -> None:
        for listener in list(self.listeners):
            try:
                listener(status, run)
            except Exception:
                logger.exception("listener failed")

    def emit_lifecycle(self, run: RunRecord, subscriber: str, outcome: str) -> None:
        for listener in list(self.lifecycle_listeners):
            try:
                listener(run, subscriber, outcome)
            except Exception:
                logger.exception("lifecycle listener failed")
