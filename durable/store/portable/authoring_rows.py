"""The authoring writes (a fork of a run's history, a callback completed, a breakpoint resumed), on the ORM."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction

from durable.engine.plan_external import BreakpointPlan, CallbackPlan, breakpoint_refusal, callback_refusal, paused_at
from durable.engine.plan_fork import ForkPlan, forked_history
from durable.engine.vocab import CheckpointKind, CheckpointStatus, RunStatus
from durable.exceptions import InvalidRunState, RunNotFound
from durable.models import Checkpoint, Run
from durable.store.portable.shared import CP_FIELDS, StoreBase, cp_record


class AuthoringRows(StoreBase):
    # Provided by RunRows: the store is one class made of these parts.
    signal: Callable[[str, str, Any, datetime], bool]

    def fork_run(self, plan: ForkPlan) -> bool:
        """Execute :class:`~durable.engine.plan_fork.ForkPlan` in one transaction; True if the run was inserted.

        The origin's row is locked first, so no requeue or late write moves its
        history while it is copied; an existing id inserts nothing (idempotent).
        """
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=plan.origin_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no run with id {plan.origin_id!r}")
            if status not in plan.expect:
                raise InvalidRunState(f"run {plan.origin_id!r} is {status}; only a finished run can be forked")
            rows = Checkpoint.objects.filter(run_id=plan.origin_id).values(*CP_FIELDS)
            history = {row["seq"]: cp_record(row) for row in rows}
            kept = forked_history(history, plan.from_seq)
            if not self._insert_runs([plan.run]):
                return False
            run_id = plan.run["id"]
            Checkpoint.objects.bulk_create(
                [Checkpoint(run_id=run_id, **{name: getattr(cp, name) for name in CP_FIELDS}) for cp in kept]
            )
        return True

    def complete_callback(self, plan: CallbackPlan) -> bool:
        """Execute :class:`~durable.engine.plan_external.CallbackPlan`; True if the run was woken.

        Under the run's row lock: the refusal (if any) is decided on what the
        lock shows, so of two completions of one callback exactly one is written.
        """
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=plan.run_id).values_list("status", flat=True).first()
            row = Checkpoint.objects.filter(run_id=plan.run_id, seq=plan.seq).values(*CP_FIELDS).first()
            refusal = callback_refusal(plan, status, cp_record(row) if row is not None else None)
            if refusal is not None:
                raise refusal
            Checkpoint.objects.filter(run_id=plan.run_id, seq=plan.seq, status=CheckpointStatus.PENDING).update(
                status=plan.status, output=plan.output, error=plan.error, finished_at=plan.now
            )
            return self.signal(plan.run_id, plan.signal, plan.envelope, plan.now)

    def resume_breakpoint(self, plan: BreakpointPlan) -> str:
        """Execute :class:`~durable.engine.plan_external.BreakpointPlan`; returns the breakpoint's label."""
        with transaction.atomic():
            status = Run.objects.select_for_update().filter(id=plan.run_id).values_list("status", flat=True).first()
            rows = Checkpoint.objects.filter(
                run_id=plan.run_id, kind=CheckpointKind.BREAKPOINT, status=CheckpointStatus.PENDING
            ).values(*CP_FIELDS)
            paused = paused_at({row["seq"]: cp_record(row) for row in rows})
            refusal = breakpoint_refusal(plan.run_id, status, paused)
            if refusal is not None:
                raise refusal
            assert paused is not None  # (breakpoint_refusal refuses a run paused nowhere)
            Checkpoint.objects.filter(run_id=plan.run_id, seq=paused.seq, status=CheckpointStatus.PENDING).update(
                status=CheckpointStatus.COMPLETED, finished_at=plan.now
            )
            Run.objects.filter(id=plan.run_id, status=RunStatus.SUSPENDED).update(wake_at=plan.now, updated_at=plan.now)
            return paused.name
