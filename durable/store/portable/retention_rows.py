"""Retention: finished runs past their age, read, claimed, exported and deleted with every row keyed to them.

The tables keyed to a run are found from the models (every foreign key to
:class:`~durable.models.Run`), so a table added later is exported and
deleted with its run without a change here. A batch is claimed first with
the run lease columns (``locked_by``/``locked_until``, as the lifecycle
publisher holds a settled run), so racing sweepers take disjoint batches;
the deletion is compare-and-set on that claim and on the run still being
finished, and re-checks under the rows' locks that no active run needs them.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django.db import models, transaction
from django.db.models import Q

from durable.engine.retention import Evicted, ExpiredRun, ExpiryRule, Line, needed
from durable.engine.serialization import or_reason
from durable.engine.vocab import ACTIVE, RUN_TOKEN, TERMINAL
from durable.models import Run, SignalWaiter

_EXPIRED = ("id", "workflow", "status", "finished_at", "parent_id", "retry_of", "continued_to")


def keyed_tables() -> list[tuple[str, type[models.Model], str]]:
    """``(name, model, field)`` of every table with a foreign key to runs, as the models declare them."""
    found = []
    for rel in Run._meta.related_objects:
        model = rel.related_model
        if isinstance(model, type) and issubclass(model, models.Model):
            found.append((str(rel.get_accessor_name()), model, rel.field.name))
    return sorted(found, key=lambda t: t[0])


def jsonable(value: Any) -> Any:
    """A column value as JSON holds it (datetimes as ISO 8601 text, a payload that did not decode as such)."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return or_reason(value)


def _expired(row: dict[str, Any]) -> ExpiredRun:
    return ExpiredRun(**{name: row[name] for name in _EXPIRED})


class RetentionRows:
    """The retention sweep's reads and its compare-and-set claim and delete."""

    def expired_runs(
        self, rule: ExpiryRule, now: datetime, after: tuple[datetime, str] | None, limit: int
    ) -> list[ExpiredRun]:
        """Runs ``rule`` covers, oldest finish first, after the keyset ``after``; none owed a lifecycle
        event or under someone's lease (a lifecycle publisher's, another sweeper's claim)."""
        qs = Run.objects.filter(status=rule.status, finished_at__lt=rule.cutoff, lifecycle_owed=False)
        qs = qs.filter(Q(locked_until__isnull=True) | Q(locked_until__lt=now))
        if rule.workflows is not None:
            qs = qs.filter(workflow__in=rule.workflows)
        elif rule.exclude:
            qs = qs.exclude(workflow__in=rule.exclude)
        if after is not None:
            qs = qs.filter(Q(finished_at__gt=after[0]) | Q(finished_at=after[0], id__gt=after[1]))
        return [_expired(row) for row in qs.order_by("finished_at", "id").values(*_EXPIRED)[:limit]]

    # -- the reads of durable.engine.retention.needed --------------------------------
    def retention_lineage(self, ids: set[str]) -> dict[str, Line]:
        rows = Run.objects.filter(id__in=ids).values_list("id", "status", "parent_id", "continued_to")
        return {rid: Line(status, parent, successor) for rid, status, parent, successor in rows}

    def retention_waited(self, ids: set[str]) -> set[str]:
        names = SignalWaiter.objects.filter(name__in=[RUN_TOKEN + rid for rid in ids]).values_list("name", flat=True)
        return {name[len(RUN_TOKEN) :] for name in names}

    def retention_retried(self, ids: set[str]) -> set[str]:
        found = Run.objects.filter(retry_of__in=ids, status__in=ACTIVE).values_list("retry_of", flat=True)
        return {rid for rid in found if rid is not None}

    def needed_runs(self, runs: list[ExpiredRun]) -> set[str]:
        """The ids among ``runs`` an active run still needs (see :func:`durable.engine.retention.needed`)."""
        return needed(runs, self)

    # -- claim, export, delete -----------------------------------------------------------
    def claim_expired(self, ids: list[str], owner: str, now: datetime, lease_until: datetime) -> list[str]:
        """Take the retention claim of those of ``ids`` still finished, owed nothing and under no lease."""
        free = Q(locked_until__isnull=True) | Q(locked_until__lt=now)
        Run.objects.filter(free, id__in=ids, status__in=TERMINAL, lifecycle_owed=False).update(
            locked_by=owner, locked_until=lease_until
        )
        mine = Run.objects.filter(id__in=ids, locked_by=owner).order_by("finished_at", "id")
        return list(mine.values_list("id", flat=True))

    def export_runs(self, ids: list[str]) -> list[dict[str, Any]]:
        """Each run of ``ids`` as JSON: ``{"run": {...}, "<table>": [...]}`` with every row keyed to it."""
        found = Run.objects.filter(id__in=ids).values()
        runs: dict[str, dict[str, Any]] = {
            row["id"]: {"run": {k: jsonable(v) for k, v in row.items()}} for row in found
        }
        for name, model, field in keyed_tables():
            keyed: dict[str, list[dict[str, Any]]] = {rid: [] for rid in runs}
            for row in model._default_manager.filter(**{f"{field}__in": list(runs)}).order_by("pk").values():
                keyed[row[f"{field}_id"]].append({k: jsonable(v) for k, v in row.items()})
            for rid, rows in keyed.items():
                runs[rid][name] = rows
        return [runs[rid] for rid in ids if rid in runs]

    def evict_runs(self, ids: list[str], owner: str) -> Evicted:
        """Delete the runs of ``ids`` this ``owner`` still claims, finished and needed by no active run,
        with every row keyed to them, in one transaction. Returns what it deleted."""
        with transaction.atomic():
            locked = Run.objects.select_for_update().filter(
                id__in=ids, locked_by=owner, status__in=TERMINAL, lifecycle_owed=False
            )
            rows = [_expired(row) for row in locked.values(*_EXPIRED)]
            keep = self.needed_runs(rows)
            gone = [r for r in rows if r.id not in keep]
            ids_gone = [r.id for r in gone]
            counts: dict[str, int] = {}
            for _name, model, field in keyed_tables():
                counts[model._meta.db_table] = model._default_manager.filter(**{f"{field}__in": ids_gone}).delete()[0]
            # The runs' own rows, without Django's collector (it would load every run to cascade,
            # and the keyed rows are gone already); still compare-and-set on the claim.
            doomed = Run.objects.filter(id__in=ids_gone, locked_by=owner, status__in=TERMINAL)
            counts[Run._meta.db_table] = doomed._raw_delete(doomed.db)
            if keep:
                Run.objects.filter(id__in=keep, locked_by=owner).update(locked_by=None, locked_until=None)
        by_status: dict[str, int] = {}
        for run in gone:
            by_status[run.status] = by_status.get(run.status, 0) + 1
        return Evicted(runs=by_status, rows=counts)

    def release_expired(self, ids: list[str], owner: str) -> None:
        """Give back the claim of runs kept (an archive hook failed): the next pass may take them again."""
        Run.objects.filter(id__in=ids, locked_by=owner, status__in=TERMINAL).update(locked_by=None, locked_until=None)
