"""The client: every operation user code, the admin and the REST API make on runs.

A :class:`Client` holds an engine and acts through it only (its store, its
transport, its registry, its clock, its settings): nothing here reads a
module global, so a test can build a client on an engine of its own. The
service functions ``durable.start``, ``durable.signal``, ... are thin wrappers
over the default client of :mod:`durable.runtime`.

Every operation validates its arguments before touching the store and raises
a :class:`~durable.DurableError` subclass with a clear message on bad input;
nothing is written in that case. Work is announced to the transport only
after the caller's transaction commits (``transaction.on_commit``), so
``start()`` inside ``transaction.atomic()`` creates a run only if the caller's
own writes commit.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from durable.client.authoring import AuthoringMixin
from durable.client.base import after_commit
from durable.client.entities import EntitiesMixin
from durable.client.messages import MessagesMixin
from durable.client.repairs import RepairsMixin
from durable.engine import admission
from durable.engine.current_step import StepInfo
from durable.engine.current_step import current_step as _current_step
from durable.engine.current_step import heartbeat as _heartbeat
from durable.engine.vocab import RunStatus
from durable.exceptions import InvalidInput, RunNotFound
from durable.results import RunInfo, RunPage
from durable.run_filters import check_filters, check_statuses, decode_cursor, encode_cursor, parse_attribute_filters
from durable.validation import check_id


class Client(MessagesMixin, RepairsMixin, AuthoringMixin, EntitiesMixin):
    """Operations on runs through ``Client(engine)``. Thread-safe: it holds no state of its own."""

    # -- starting and reading runs ------------------------------------------------------

    def start(
        self,
        workflow: Any,
        input: Any = None,
        *,
        run_id: str | None = None,
        tags: list[str] | None = None,
        namespace: str | None = None,
        search_attributes: dict[str, Any] | None = None,
        priority: int = 0,
    ) -> str:
        """Start ``workflow`` and return the run id (see :func:`durable.start`)."""
        run_id = check_id(run_id) if run_id is not None else uuid.uuid4().hex
        fields = self._start_fields(
            workflow,
            input,
            run_id,
            tags=tags,
            namespace=namespace,
            search_attributes=search_attributes,
            priority=priority,
        )
        self._traced_create(fields, partial(self._create, max_queue_depth=self._start_depth(fields)))
        return run_id

    def get_run(self, run_id: str, *, follow: bool = False) -> RunInfo:
        """The run's current state (see :func:`durable.get_run`)."""
        check_id(run_id)
        store = self.engine.store
        rec = store.get_run(run_id)
        if rec is not None and follow:
            while rec is not None and rec.continued_to:
                rec = store.get_run(rec.continued_to)
        if rec is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return RunInfo.from_record(rec)

    def list_runs(
        self,
        *,
        status: str | list[str] | None = None,
        workflow: str | None = None,
        namespace: str | None = None,
        tag: str | None = None,
        attributes: dict[str, Any] | None = None,
        created_after: Any = None,
        created_before: Any = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs matching every given filter, newest first (see :func:`durable.list_runs`)."""
        statuses = check_statuses(status)
        created_after, created_before = check_filters(
            workflow=workflow,
            namespace=namespace,
            tag=tag,
            created_after=created_after,
            created_before=created_before,
            limit=limit,
        )
        after = decode_cursor(cursor) if cursor is not None else None
        records = self.engine.store.list_runs(
            statuses=statuses,
            workflow=workflow,
            namespace=namespace,
            tag=tag,
            attributes=parse_attribute_filters(attributes),
            created_after=created_after,
            created_before=created_before,
            after=after,
            limit=limit + 1,
        )
        items = [RunInfo.from_record(r) for r in records[:limit]]
        next_cursor = None
        if len(records) > limit and items:
            last = records[limit - 1]
            next_cursor = encode_cursor(last.created_at, last.id)
        return RunPage(items, next_cursor)

    # -- acting on runs ------------------------------------------------------------------

    def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send signal ``name`` to a run (see :func:`durable.signal`)."""
        check_id(run_id)
        payload = self._signal_payload(name, payload)
        engine = self.engine
        with engine.store.atomic():
            if engine.store.signal(run_id, name, payload, engine.clock.now()):
                after_commit(lambda: engine.transport.dispatch_turn(run_id))

    def cancel(self, run_id: str, *, compensate: bool = False) -> bool:
        """Cancel a run and its children (see :func:`durable.cancel`)."""
        check_id(run_id)
        if not isinstance(compensate, bool):
            raise InvalidInput(f"compensate must be a boolean, got {compensate!r}")
        engine = self.engine
        with engine.store.atomic():
            result = engine.store.cancel(run_id, engine.clock.now(), compensate)
            self._dispatch_after_commit(list(result.woken))
            if result.cancelled:
                after_commit(lambda: engine.emit_settled(RunStatus.CANCELLED, result.cancelled))
                # Steps of cancelled runs hold no slot any more: limited queues admit their next steps.
                after_commit(lambda: admission.admit_next(engine, engine.settings.queues))
        return result.done

    def heartbeat(self, progress: Any = None) -> bool:
        """From inside a dispatched step: record liveness (see :func:`durable.heartbeat`)."""
        return _heartbeat(self.engine, progress)

    def current_step(self) -> StepInfo | None:
        """Inside a dispatched step: which one (see :func:`durable.current_step`)."""
        return _current_step()
