"""The runs table's indexes on PostgreSQL: what a write of a run maintains, and what the tag lookups use.

No write of a run's status is a HOT update, so each write adds an entry to
every index whose condition the new row meets: an index that holds every run
costs every write. Runs without tags stay out of the tags index, and no index
on the run id serves a prefix match nobody makes (migration 0024).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

import durable
from durable.models import Run
from durable.store.portable.run_reads import with_tag
from durable_dashboard.filters import search

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'durable_run'")
        return dict(cursor.fetchall())


def _size(index: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s::regclass)", [index])
        return int(cursor.fetchone()[0])


def _runs(n: int, prefix: str, tags: list[str] | None = None) -> None:
    at = timezone.now()
    Run.objects.bulk_create(
        Run(id=f"{prefix}{i}", workflow="ix_flow", status="completed", tags=tags or [], created_at=at, updated_at=at)
        for i in range(n)
    )


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _index_scans(queryset: Any) -> list[str]:
    """The indexes the plan of ``queryset`` reads, with sequential scans off (can an index serve it at all?)."""
    sql, params = queryset.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("ANALYZE durable_run")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)
    return [node["Index Name"] for node in _nodes(plan[0]["Plan"]) if "Index Name" in node]


def test_the_only_index_on_a_run_id_alone_is_the_primary_key() -> None:
    on_id = [name for name, definition in _indexes().items() if re.search(r"\(id( \w+)?\)$", definition)]
    assert on_id == ["durable_run_pkey"]


def test_runs_without_tags_add_nothing_to_the_tags_index() -> None:
    empty = _size("durable_run_tags_gin")
    _runs(3000, "ix-plain-")
    # A full GIN index keeps an entry for a row without keys: 3,000 of them fill pages.
    assert _size("durable_run_tags_gin") == empty
    _runs(300, "ix-tagged-", ["vip", "eu"])
    assert _size("durable_run_tags_gin") > empty


def test_every_tag_lookup_can_use_the_tags_index() -> None:
    _runs(3000, "ix-plain-")
    _runs(30, "ix-tagged-", ["vip"])
    lookups = {
        "store": with_tag(Run.objects.all(), "vip").order_by(),
        "admin search": search(Run.objects.all(), "vip").order_by(),
    }
    for name, queryset in lookups.items():
        assert sorted(queryset.values_list("id", flat=True)) == sorted(f"ix-tagged-{i}" for i in range(30)), name
        assert "durable_run_tags_gin" in _index_scans(queryset), name
    assert len(durable.list_runs(tag="vip", limit=100).items) == 30
