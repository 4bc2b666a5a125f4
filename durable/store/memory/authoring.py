"""Runs made by the authoring operations (a fork of another run's history), in memory."""

from __future__ import annotations

from durable.engine.plan_fork import ForkPlan, forked_history
from durable.exceptions import InvalidRunState, RunNotFound
from durable.store.memory.base import MemoryBase, atomically
from durable.store.memory.tables import checkpoint_record, new_checkpoint


class AuthoringPart(MemoryBase):
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
