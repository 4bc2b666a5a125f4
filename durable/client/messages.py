"""Talking to runs from outside: named events, updates, published values, waiting for a result."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from durable.client.base import ClientBase
from durable.engine import lifecycle, logs
from durable.engine.new_runs import clean_input, run_fields
from durable.engine.serialization import to_json
from durable.engine.vocab import TERMINAL, UPDATE_TOKEN
from durable.exceptions import EventNotSet, InvalidInput, InvalidRunState, RunNotFound, WaitTimeout, WorkflowNotFound
from durable.results import EventResult, RunInfo, UpdateResult
from durable.validation import check_id, check_name, check_timeout

logger = logging.getLogger("durable.events")

MISSING: Any = object()


class MessagesMixin(ClientBase):
    """Events, updates, values a run published, and waiting for a run to settle."""

    def publish_event(self, name: str, payload: Any = None, *, id: str | None = None) -> EventResult:
        """Publish named event ``name`` (see :func:`durable.publish_event`)."""
        check_name(name, "event name")
        if name.startswith("run."):
            raise InvalidInput("event names starting with 'run.' are lifecycle events, published by the engine")
        event_id = check_id(id, "event id") if id is not None else uuid.uuid4().hex
        engine = self.engine
        payload = to_json(payload, f"payload of event {name!r}", max_bytes=engine.settings.max_payload_bytes)
        now = engine.clock.now()
        started: list[str] = []
        refused: dict[str, str] = {}
        coalesced: list[str] = []
        with engine.store.atomic():
            outcome = engine.store.publish_event(name, payload, event_id, now)
            if not outcome["duplicate"]:
                batched = self._start_subscribers(name, event_id, payload, now, started, refused)
                coalesced = [subscriber for subscriber, _, _, _ in batched]
                fired = engine.store.accumulate(batched, now, lifecycle.batch_run_maker(engine)) if batched else []
                self._dispatch_after_commit(fired)
                started += fired
            engine.store.wake(outcome["delivered"], now)
            self._dispatch_after_commit(outcome["delivered"])
        return EventResult(
            event_id=event_id,
            delivered=outcome["delivered"],
            started=started,
            refused=refused,
            buffered=outcome["buffered"],
            duplicate=outcome["duplicate"],
            coalesced=coalesced,
        )

    def _start_subscribers(
        self, name: str, event_id: str, payload: Any, now: Any, started: list[str], refused: dict[str, str]
    ) -> list[tuple[str, Any, str, dict[str, Any]]]:
        """Start each workflow subscribed to event ``name`` (``on_event``), once per event id.

        Returns what debounce and batch subscribers take instead, for their
        accumulators: ``(subscriber, input, event id, policy)``.
        """
        settings = self.engine.settings
        batched: list[tuple[str, Any, str, dict[str, Any]]] = []
        for wf in self.engine.registry.subscribers(name):
            run_id = f"{event_id[:200]}:{wf.name}"
            try:
                value = clean_input(wf, payload, settings.max_payload_bytes)
                fields = run_fields(
                    wf, run_id, value, now=now, namespace=settings.default_namespace, tags=[f"event:{name}"]
                )
            except InvalidInput as exc:
                refused[wf.name] = str(exc)
                logger.warning(
                    "event %s (%s) not started for %s: %s",
                    name,
                    event_id,
                    wf.name,
                    exc,
                    extra=logs.fields(workflow=wf.name),
                )
                continue
            if wf.debounce is not None or wf.batch is not None:
                batched.append((wf.name, value, event_id, lifecycle.batch_policy(wf)))
            elif self._create(fields):
                started.append(run_id)
        return batched

    def update(self, run_id: str, name: str, arg: Any = None) -> UpdateResult:
        """Send update ``name`` to a run (see :func:`durable.update`)."""
        check_id(run_id)
        check_name(name, "update name")
        engine = self.engine
        rec = engine.store.get_run(run_id)
        if rec is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if rec.status in TERMINAL:
            return UpdateResult(False, f"run {run_id!r} is {rec.status}")
        try:
            wf = engine.registry.get_workflow(rec.workflow, rec.version)
        except WorkflowNotFound as exc:
            return UpdateResult(False, str(exc))
        if name not in wf.updates:
            accepted = ", ".join(sorted(wf.updates)) or "none"
            return UpdateResult(False, f"workflow {wf.name!r} accepts no update named {name!r} (accepts: {accepted})")
        validator = wf.updates[name]
        if validator is not None:
            try:
                cleaned = validator(arg)
            except Exception as exc:  # noqa: BLE001 - the validator's refusal, whatever its type
                return UpdateResult(False, str(exc) or type(exc).__name__)
            if cleaned is not None:
                arg = cleaned
        try:
            value = to_json(arg, f"argument of update {name!r}", max_bytes=engine.settings.max_payload_bytes)
        except InvalidInput as exc:
            return UpdateResult(False, str(exc))
        try:
            with engine.store.atomic():
                if engine.store.signal(run_id, UPDATE_TOKEN + name, value, engine.clock.now()):
                    self._dispatch_after_commit([run_id])
        except InvalidRunState as exc:
            return UpdateResult(False, str(exc))
        return UpdateResult(True)

    def get_event(self, run_id: str, key: str, default: Any = MISSING) -> Any:
        """The value a run published with ``ctx.set_event`` (see :func:`durable.get_event`)."""
        check_id(run_id)
        if not isinstance(key, str) or not key:
            raise InvalidInput(f"key must be a non-empty string, got {key!r}")
        rec = self.engine.store.get_run(run_id)
        if rec is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        values = rec.query_values or {}
        if key in values:
            return values[key]
        if default is not MISSING:
            return default
        raise EventNotSet(f"run {run_id!r} has not set {key!r}")

    def wait_for_run(self, run_id: str, timeout: float = 30.0) -> RunInfo:
        """Block until ``run_id`` settles (see :func:`durable.wait_for_run`); ``timeout`` is real seconds."""
        check_id(run_id)
        check_timeout(timeout)
        deadline = time.monotonic() + timeout
        pause = 0.01
        while True:
            rec = self.engine.store.resolve_run(run_id)
            if rec is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            if rec.status in TERMINAL:
                return RunInfo.from_record(rec)
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"run {run_id!r} is still {rec.status} after {timeout}s")
            time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
            pause = min(pause * 2, 0.5)
