"""Repairs an operator makes on runs: requeue, re-dispatch, retry with new input, republish lifecycle events."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from durable.client.base import ClientBase
from durable.engine import lifecycle
from durable.engine.new_runs import clean_input, successor_fields
from durable.engine.vocab import RunStatus
from durable.exceptions import InvalidInput, InvalidRunState, RunNotFound, WorkflowNotFound
from durable.validation import check_aware, check_id, check_limit, check_name

# Statuses of settled runs whose lifecycle events ``republish`` sends, by ``ending``.
_ENDINGS: dict[str | None, list[str]] = {
    "completed": [RunStatus.COMPLETED],
    "failed": [RunStatus.FAILED, RunStatus.DEAD],
    None: [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD],
}


class RepairsMixin(ClientBase):
    """Operations that set a run going again or deliver again what it owes."""

    def requeue(self, run_id: str) -> None:
        """Put a ``failed`` or ``dead`` run back to ``pending`` (see :func:`durable.requeue`)."""
        check_id(run_id)
        engine = self.engine
        rec = engine.store.get_run(run_id)
        if rec is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        now = engine.clock.now()
        deadline = None
        try:
            wf = engine.registry.get_workflow(rec.workflow, rec.version)
            deadline = now + timedelta(seconds=wf.timeout) if wf.timeout else None
        except WorkflowNotFound:
            pass  # it will be parked as blocked until its code is deployed
        with engine.store.atomic():
            self._dispatch_after_commit(engine.store.requeue(run_id, now, deadline))

    def redispatch_pending(self, run_id: str) -> int:
        """Dispatch again every pending step of an active run (see :func:`durable.redispatch_pending`)."""
        check_id(run_id)
        engine = self.engine
        now = engine.clock.now()
        redelivery = timedelta(seconds=engine.settings.step_lease or engine.settings.reconcile_after)
        with engine.store.atomic():
            rows = engine.store.pending_steps(run_id, now, now + redelivery)

            def dispatch() -> None:
                for seq, queue in rows:
                    engine.transport.dispatch_step(run_id, seq, queue)

            transaction.on_commit(dispatch)
        return len(rows)

    def retry_with_input(self, run_id: str, input: Any) -> str:
        """Start a new run of a failed run's workflow with corrected input (see :func:`durable.retry_with_input`)."""
        check_id(run_id)
        engine = self.engine
        origin = engine.store.get_run(run_id)
        if origin is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        if origin.status not in (RunStatus.FAILED, RunStatus.DEAD):
            raise InvalidRunState(f"run {run_id!r} is {origin.status}; only failed or dead runs can be retried")
        wf = engine.registry.get_workflow(origin.workflow)
        value = clean_input(wf, input, engine.settings.max_payload_bytes)
        new_id = f"{run_id[:230]}~retry~{uuid.uuid4().hex[:12]}"
        self._create(
            successor_fields(
                wf, new_id, value, origin, now=engine.clock.now(), parent_id=origin.parent_id, retry_of=origin.id
            )
        )
        return new_id

    def republish(
        self,
        run_id: str | None = None,
        *,
        workflow: str | None = None,
        ending: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        subscriber: str | None = None,
        limit: int = 100,
    ) -> dict[str, dict[str, str]]:
        """Publish settled runs' lifecycle events again (see :func:`durable.republish`)."""
        if run_id is not None:
            check_id(run_id)
        if workflow is not None:
            check_name(workflow, "workflow")
        if subscriber is not None:
            check_name(subscriber, "subscriber")
        if ending not in _ENDINGS:
            raise InvalidInput(f"ending must be 'completed' or 'failed', got {ending!r}")
        check_aware(since, "since")
        check_aware(until, "until")
        check_limit(limit, 10_000)
        engine = self.engine
        if run_id is not None and engine.store.get_run(run_id) is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        report: dict[str, dict[str, str]] = {}
        targets = engine.store.republish_targets(
            run_id=run_id, workflow=workflow, statuses=list(_ENDINGS[ending]), since=since, until=until, limit=limit
        )
        for target in targets:
            rec = engine.store.get_run(target)
            if rec is None:
                continue
            end = lifecycle.ending_of(rec.status) or "completed"
            subs = [subscriber] if subscriber else lifecycle.subscribers_for(engine, rec.workflow, end)
            report[target] = lifecycle.publish(engine, target, only=subs, republish=True) if subs else {}
        return report
