"""The authoring writes (a fork of a run's history, a callback completed, a breakpoint resumed), in memory."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from durable.engine.plan_external import BreakpointPlan, CallbackPlan, breakpoint_refusal, callback_refusal, paused_at
from durable.engine.plan_fork import ForkPlan, forked_history
from durable.engine.vocab import CheckpointStatus, RunStatus
from durable.exceptions import InvalidRunState, RunNotFound
from durable.store.memory.base import MemoryBase, atomically
from durable.store.memory.tables import as_json, checkpoint_record, new_checkpoint


class AuthoringPart(MemoryBase):
    # Provided by RunsPart: the store is one class made of these parts.
    signal: Callable[[str, str, Any, datetime], bool]

    @atomically
    def fork_run(self, plan: ForkPlan) -> bool:
        """Execute :class:`~durable.engine.plan_fork.ForkPlan`; True if inserted (as the portable store)."""
        origin = self.tables.runs.get(plan.origin_id)
        if origin is None:
            raise RunNotFound(f"no run with id {plan.origin_id!r}")
        if origin["status"] not in plan.expect:
            raise InvalidRunState(f"run {plan.origin_id!r} is {origin['status']}; only a finished run can be forked")
        history = {seq: checkpoint_record(row) for seq, row in self.tables.history(plan.origin_id).items()}
        kept = forked_history(history, plan.from_seq)
        if not self._insert_runs([plan.run]):
            return False
        run_id = plan.run["id"]
        rows = self.tables.history(run_id)
        for cp in kept:
            self.tables.put(rows, cp.seq, new_checkpoint(run_id, cp, self.tables.next_id()))
        return True

    @atomically
    def complete_callback(self, plan: CallbackPlan) -> bool:
        """Execute :class:`~durable.engine.plan_external.CallbackPlan`; True if the run was woken."""
        run = self.tables.runs.get(plan.run_id)
        row = self.tables.history(plan.run_id).get(plan.seq) if run is not None else None
        refusal = callback_refusal(plan, run["status"] if run else None, checkpoint_record(row) if row else None)
        if refusal is not None:
            raise refusal
        assert row is not None
        self.tables.set(
            row, status=plan.status, output=as_json(plan.output), error=as_json(plan.error), finished_at=plan.now
        )
        return self.signal(plan.run_id, plan.signal, plan.envelope, plan.now)

    @atomically
    def resume_breakpoint(self, plan: BreakpointPlan) -> str:
        """Execute :class:`~durable.engine.plan_external.BreakpointPlan`; returns the breakpoint's label."""
        run = self.tables.runs.get(plan.run_id)
        history = self.tables.history(plan.run_id) if run is not None else {}
        paused = paused_at({seq: checkpoint_record(row) for seq, row in history.items()})
        refusal = breakpoint_refusal(plan.run_id, run["status"] if run else None, paused)
        if refusal is not None:
            raise refusal
        assert paused is not None and run is not None  # (breakpoint_refusal refuses both)
        self.tables.set(history[paused.seq], status=CheckpointStatus.COMPLETED, finished_at=plan.now)
        if run["status"] == RunStatus.SUSPENDED:
            self.tables.set(run, wake_at=plan.now, updated_at=plan.now)
        return paused.name
