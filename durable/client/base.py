"""What every part of the client shares: its engine, and how a new run is created and announced."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import transaction

from durable.engine import observe
from durable.engine.core import Engine
from durable.engine.namespaces import serves_namespace
from durable.engine.new_runs import clean_input, run_fields
from durable.engine.serialization import to_json
from durable.engine.vocab import RunStatus
from durable.exceptions import InvalidInput
from durable.validation import check_name, check_priority, check_tags

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

    def _start_fields(
        self,
        workflow: Any,
        input: Any,
        run_id: str,
        *,
        tags: list[str] | None = None,
        namespace: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        priority: int = 0,
    ) -> dict[str, Any]:
        """The validated columns of a new run started by :func:`durable.start` (raises on bad input)."""
        settings = self.engine.settings
        wf = self.engine.registry.resolve_workflow(workflow)
        namespace = check_name(namespace, "namespace") if namespace is not None else settings.default_namespace
        tags = check_tags(tags)
        if search_attributes is None:
            search_attributes = {}
        if not isinstance(search_attributes, dict) or not all(isinstance(k, str) for k in search_attributes):
            raise InvalidInput("search_attributes must be a dict with string keys")
        search_attributes = to_json(search_attributes, "search_attributes", max_bytes=64 * 1024)
        priority = check_priority(priority)
        value = clean_input(wf, input, settings.max_payload_bytes)
        return run_fields(
            wf,
            run_id,
            value,
            now=self.engine.clock.now(),
            namespace=namespace,
            tags=tags,
            search_attributes=search_attributes,
            priority=priority,
        )

    def _signal_payload(self, name: Any, payload: Any) -> Any:
        """Check a user signal's name and return its payload as JSON (raises InvalidInput)."""
        check_name(name, "signal name")
        if name.startswith("__"):
            raise InvalidInput(f"signal names starting with '__' are reserved, got {name!r}")
        return to_json(payload, f"payload of signal {name!r}", max_bytes=self.engine.settings.max_payload_bytes)

    def _traced_create(self, fields: dict[str, Any], create: Callable[[dict[str, Any]], bool] | None = None) -> bool:
        """``create(fields)`` (default :meth:`_create`) under a ``durable.start`` span.

        The run keeps the span's context for its later spans.
        """
        create = create or self._create
        observer = self.engine.observer
        if not observer.enabled:
            return create(fields)
        attributes = {"run_id": fields["id"], "workflow": fields["workflow"], "version": fields["version"]}
        span = observer.begin(observe.START, attributes)
        fields["trace_context"] = span.context()
        try:
            created = create(fields)
        except BaseException as exc:
            span.fail(exc)
            span.end("error")
            raise
        span.end("started" if created else "exists")
        return created

    def _create(self, fields: dict[str, Any], max_queue_depth: int | None = None) -> bool:
        """Insert a run (idempotent) and dispatch it after the caller's transaction commits.

        Outside a transaction, on a transport that runs turns in this process, the
        run is inserted already leased to this process and its first turn starts
        at once, without a separate acquire. If this process dies first, the
        lease expires and the orphan sweep takes the run, as for any turn.
        A run of a singleton workflow is admitted to its key instead
        (``max_queue_depth``: refuse with :class:`~durable.QueueFull` past it).
        """
        engine = self.engine
        run_id, namespace = fields["id"], fields["namespace"]
        if fields.get("singleton_key") is not None:
            return self._admit(fields, max_queue_depth)
        if transaction.get_connection().in_atomic_block:
            with engine.store.atomic():
                created = engine.store.create_run(fields)
                if created:
                    after_commit(lambda: engine.transport.dispatch_turn(run_id, namespace=namespace))
            return created
        # A process scoped to other namespaces (durable_worker --namespace) only writes the run.
        if not engine.transport.takes_leased_runs() or not serves_namespace(engine.namespaces, namespace):
            created = engine.store.create_run(fields)
            if created:
                ring(lambda: engine.transport.dispatch_turn(run_id, namespace=namespace))
            return created
        now = engine.clock.now()
        run = engine.store.create_leased_run(fields, engine.owner, now, now + timedelta(seconds=engine.settings.lease))
        if run is not None:
            engine.transport.run_leased(run)
        return run is not None

    def _admit(self, fields: dict[str, Any], max_queue_depth: int | None) -> bool:
        """Admit a new singleton run to its key; dispatch it (if admitted) after the caller's commit.

        Queued, it is not dispatched: the hand-over that admits it does.
        """
        result = self.engine.store.admit_run(fields, max_queue_depth, fields["created_at"])
        due = [fields["id"]] if result.status == RunStatus.PENDING else []
        self._dispatch_after_commit(due + list(result.admitted))
        return result.created

    def _insert(self, fields: dict[str, Any], max_queue_depth: int | None = None) -> bool:
        """Insert a run without announcing it (the caller does); a singleton's is admitted to its key."""
        if fields.get("singleton_key") is None:
            return self.engine.store.create_run(fields)
        result = self.engine.store.admit_run(fields, max_queue_depth, fields["created_at"])
        self._dispatch_after_commit(list(result.admitted))
        return result.created

    def _start_depth(self, fields: dict[str, Any]) -> int | None:
        """The queue depth a start of this run's workflow may not pass (None: no singleton, or no bound)."""
        if fields.get("singleton_key") is None:
            return None
        spec = self.engine.registry.get_workflow(fields["workflow"], fields["version"]).singleton
        return spec.max_queue_depth if spec is not None else None

    def _dispatch_after_commit(self, run_ids: list[str]) -> None:
        """Announce the turns of ``run_ids`` once the current transaction commits."""
        if run_ids:
            transport = self.engine.transport

            def dispatch() -> None:
                for rid in run_ids:
                    transport.dispatch_turn(rid)

            after_commit(dispatch)
