"""Run lists in memory: the filters and keyset pages of :func:`durable.list_runs`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from durable.engine.ports import RunRecord
from durable.store.memory.base import MemoryBase, locked
from durable.store.memory.tables import Row, run_record

_MISSING = object()


def _compare(stored: Any, op: str, value: Any) -> bool:
    """One search-attribute comparison, as the database compares JSON values (same kinds only)."""
    if op == "eq":
        return bool(stored == value)
    if op == "ne":
        return bool(stored != value)
    if op == "in":
        return stored in value
    numbers = (int, float)
    comparable = (isinstance(stored, numbers) and isinstance(value, numbers) and not isinstance(stored, bool)) or (
        isinstance(stored, str) and isinstance(value, str)
    )
    if not comparable:
        return False
    ordered: dict[str, bool] = {
        "lt": stored < value,
        "lte": stored <= value,
        "gt": stored > value,
        "gte": stored >= value,
    }
    return ordered[op]


def _listed(
    row: Row,
    statuses: list[str],
    workflow: str | None,
    namespace: str | None,
    tag: str | None,
    attributes: list[tuple[str, str, Any]],
) -> bool:
    if (statuses and row["status"] not in statuses) or (workflow and row["workflow"] != workflow):
        return False
    if (namespace and row["namespace"] != namespace) or (tag and tag not in row["tags"]):
        return False
    for key, op, value in attributes:
        stored = row["search_attributes"].get(key, _MISSING)
        if stored is _MISSING or not _compare(stored, op, value):
            return False
    return True


class ListingPart(MemoryBase):
    @locked
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
        """Runs matching every filter, newest first (``after``: the page after that (created_at, id))."""
        rows = [
            row
            for row in self.tables.runs.values()
            if _listed(row, statuses, workflow, namespace, tag, attributes)
            and (created_after is None or row["created_at"] >= created_after)
            and (created_before is None or row["created_at"] < created_before)
            and (after is None or (row["created_at"], row["id"]) < after)
        ]
        rows.sort(key=lambda row: (row["created_at"], row["id"]), reverse=True)
        return [run_record(row) for row in rows[:limit]]
