"""Authoring operations: fork a finished run, signal a run starting it if absent, callbacks, breakpoints."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from durable.client.base import ClientBase, after_commit
from durable.engine import callbacks
from durable.engine.new_runs import clean_input, successor_fields
from durable.engine.plan_external import BreakpointPlan, plan_callback
from durable.engine.plan_fork import check_from_seq, plan_fork
from durable.engine.serialization import error_record, to_json
from durable.engine.vocab import TERMINAL
from durable.exceptions import InvalidInput, InvalidRunState, RunNotFound
from durable.validation import check_id


class AuthoringMixin(ClientBase):
    """Operations that make new runs out of recorded history."""

    def fork(self, run_id: str, from_seq: int, *, input: Any = None, new_run_id: str | None = None) -> str:
        """Start a new run from ``run_id``'s history before ``from_seq`` (see :func:`durable.fork`)."""
        check_id(run_id)
        new_id = check_id(new_run_id) if new_run_id is not None else f"{run_id[:230]}~fork~{uuid.uuid4().hex[:12]}"
        engine = self.engine
        origin = engine.store.get_run(run_id)
        if origin is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if origin.status not in TERMINAL:
            raise InvalidRunState(
                f"run {run_id!r} is {origin.status}; only a finished run (completed, failed, cancelled or dead) "
                "can be forked: wait for it, or cancel it first"
            )
        check_from_seq(from_seq, engine.store.load_checkpoints(run_id))
        wf = engine.registry.get_workflow(origin.workflow)
        value = origin.input if input is None else clean_input(wf, input, engine.settings.max_payload_bytes)
        fields = successor_fields(wf, new_id, value, origin, now=engine.clock.now())
        with engine.store.atomic():
            created = engine.store.fork_run(plan_fork(origin, from_seq, fields))
            if created:
                after_commit(lambda: engine.transport.dispatch_turn(new_id))
        if not created:
            existing = engine.store.get_run(new_id)
            same = existing is not None and (existing.forked_from, existing.forked_at_seq) == (run_id, from_seq)
            if not same:
                raise InvalidInput(f"run id {new_id!r} is already taken by another run")
        return new_id

    def signal_with_start(
        self,
        workflow: Any,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        input: Any = None,
        **start_options: Any,
    ) -> str:
        """Start ``run_id`` if absent and signal it, in one transaction (see :func:`durable.signal_with_start`)."""
        check_id(run_id)
        payload = self._signal_payload(name, payload)
        # start_options: the keyword arguments of start() (tags, namespace, search_attributes, priority).
        fields = self._start_fields(workflow, input, run_id, **start_options)
        engine = self.engine
        with engine.store.atomic():
            # The insert decides between concurrent callers (the primary key): a loser waits for
            # the winner's transaction, then finds the run and only signals it, after the winner.
            created = self._traced_create(fields, partial(self._insert, max_queue_depth=self._start_depth(fields)))
            if not created:
                existing = engine.store.get_run(run_id)
                if existing is not None and existing.workflow != fields["workflow"]:
                    raise InvalidInput(
                        f"run {run_id!r} is a run of workflow {existing.workflow!r}, not {fields['workflow']!r}"
                    )
            woken = engine.store.signal(run_id, name, payload, engine.clock.now())
            if created or woken:
                after_commit(lambda: engine.transport.dispatch_turn(run_id))
        return run_id

    # -- completions from outside the run --------------------------------------------------
    def complete_callback(self, token: str, payload: Any = None) -> None:
        """Complete the callback ``token`` names with ``payload`` (see :func:`durable.complete_callback`)."""
        value = to_json(payload, "callback payload", max_bytes=self.engine.settings.max_payload_bytes)
        self._settle_callback(token, payload=value)

    def fail_callback(self, token: str, error: Any) -> None:
        """Fail the callback ``token`` names with ``error`` (see :func:`durable.fail_callback`)."""
        if isinstance(error, BaseException):
            record: Any = {k: v for k, v in error_record(error, retryable=False).items() if k != "traceback"}
        elif isinstance(error, str) and error:
            record = {"message": error}
        elif isinstance(error, dict) and isinstance(error.get("message"), str):
            record = to_json(error, "callback error", max_bytes=self.engine.settings.max_payload_bytes)
        else:
            raise InvalidInput(f"error must be a message, a dict with a 'message' or an exception, got {error!r}")
        self._settle_callback(token, error=record)

    def _settle_callback(self, token: str, **outcome: Any) -> None:
        engine = self.engine
        run_id, seq = callbacks.read_token(engine.settings.callback_secret, token)
        plan = plan_callback(run_id, seq, token, engine.clock.now(), **outcome)
        with engine.store.atomic():
            if engine.store.complete_callback(plan):
                after_commit(lambda: engine.transport.dispatch_turn(run_id))

    def resume_breakpoint(self, run_id: str) -> str:
        """Let a run paused at a breakpoint go on; its label (see :func:`durable.resume_breakpoint`)."""
        check_id(run_id)
        engine = self.engine
        with engine.store.atomic():
            label = engine.store.resume_breakpoint(BreakpointPlan(run_id, engine.clock.now()))
            after_commit(lambda: engine.transport.dispatch_turn(run_id))
        return label
