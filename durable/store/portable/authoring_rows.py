"""Runs made by the authoring operations (a fork of another run's history), as the portable store writes them."""

from __future__ import annotations

from django.db import transaction

from durable.engine.plan_fork import ForkPlan, forked_history
from durable.exceptions import InvalidRunState, RunNotFound
from durable.models import Checkpoint, Run
from durable.store.portable.shared import CP_FIELDS, StoreBase, cp_record


class AuthoringRows(StoreBase):
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
