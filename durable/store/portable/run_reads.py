"""Reads of runs: one run, the run that settles another, lists and the dashboard's filters."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Q

from durable.engine.ports import RunRecord
from durable.engine.vocab import RunStatus
from durable.models import Run
from durable.store.portable.shared import StoreBase, run_record
from durable.store.statements import HAS_TAG


def with_tag(qs: Any, tag: str) -> Any:
    """Runs of ``qs`` whose tags include ``tag``: JSON containment where the database has it, else json_each.

    On PostgreSQL the tags index holds only runs with tags (migration 0024), so
    the lookup also says the run has some: the planner uses an index only when
    the query implies its condition.
    """
    if connection.features.supports_json_field_contains:
        return qs.filter(tags__contains=[tag]).exclude(tags=[])
    return qs.extra(where=[HAS_TAG], params=[tag])


class RunReads(StoreBase):
    def get_run(self, run_id: str) -> RunRecord | None:
        row = Run.objects.filter(id=run_id).first()
        return run_record(row) if row is not None else None

    def resolve_run(self, run_id: str) -> RunRecord | None:
        """The run whose outcome stands for ``run_id``.

        Follows continue-as-new to the chain's latest run; for a failed or dead
        run, a completed retry-with-input of it stands in for it.
        """
        row = Run.objects.filter(id=run_id).first()
        seen: set[str] = set()
        while row is not None and row.continued_to and row.continued_to not in seen:
            seen.add(row.id)
            row = Run.objects.filter(id=row.continued_to).first()
        if row is not None and row.status in (RunStatus.FAILED, RunStatus.DEAD):
            retry = Run.objects.filter(retry_of=row.id, status=RunStatus.COMPLETED).order_by("-finished_at").first()
            if retry is not None:
                return self.resolve_run(retry.id)
        return run_record(row) if row is not None else None

    def list_runs(
        self,
        *,
        statuses: list[str],
        workflow: str | None,
        namespace: str | None,
        tag: str | None,
        attributes: list[tuple[str, str, Any]],
        created_after: datetime | None,
        created_before: datetime | None,
        after: tuple[datetime, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        qs = self.runs_queryset(
            statuses=statuses, workflow=workflow, namespace=namespace, tag=tag, attributes=attributes
        )
        if created_after is not None:
            qs = qs.filter(created_at__gte=created_after)
        if created_before is not None:
            qs = qs.filter(created_at__lt=created_before)
        if after is not None:
            qs = qs.filter(Q(created_at__lt=after[0]) | Q(created_at=after[0], id__lt=after[1]))
        return [run_record(row) for row in qs.order_by("-created_at", "-id")[:limit]]

    def runs_queryset(
        self,
        *,
        statuses: list[str] | None = None,
        workflow: str | None = None,
        namespace: str | None = None,
        tag: str | None = None,
        attributes: list[tuple[str, str, Any]] | None = None,
    ) -> Any:
        """Runs filtered as :func:`durable.list_runs` does (shared with the dashboard)."""
        qs = Run.objects.all()
        if statuses:
            qs = qs.filter(status__in=statuses)
        if workflow:
            qs = qs.filter(workflow=workflow)
        if namespace:
            qs = qs.filter(namespace=namespace)
        if tag:
            qs = with_tag(qs, tag)
        for key, op, value in attributes or []:
            path = f"search_attributes__{key}"
            qs = qs.filter(**{"search_attributes__has_key": key})
            if op == "eq":
                qs = qs.filter(**{path: value})
            elif op == "ne":
                qs = qs.exclude(**{path: value})
            else:
                qs = qs.filter(**{f"{path}__{op}": value})
        return qs
