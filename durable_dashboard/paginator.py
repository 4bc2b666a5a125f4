"""A paginator that never counts a whole table.

Django's paginator runs ``SELECT COUNT(*)`` over the filtered queryset for every
page. On millions of runs that is the slowest query of the page. Here:

* unfiltered on PostgreSQL: the planner's estimate (``pg_class.reltuples``), exact
  only when the table is small;
* otherwise: a bounded count, ``COUNT(*)`` over at most ``COUNT_LIMIT + 1`` rows.

``is_capped`` tells templates that the real number may be larger.
"""

from __future__ import annotations

from functools import cached_property

from django.core.paginator import Paginator
from django.db import connections

from durable_dashboard import conf


def estimated_rows(table: str, using: str = "default") -> int | None:
    """PostgreSQL's estimate of the rows in ``table``; ``None`` elsewhere or when unknown."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    if not row or row[0] is None or row[0] < 0:
        return None
    return int(row[0])


class EstimatedCountPaginator(Paginator):
    """See the module docstring."""

    is_capped = False

    @cached_property
    def count(self) -> int:  # type: ignore[override]
        qs = self.object_list
        limit = int(conf.get("COUNT_LIMIT"))
        query = getattr(qs, "query", None)
        if query is None:
            return len(qs)
        if not query.where:
            estimate = estimated_rows(qs.model._meta.db_table, qs.db)
            if estimate is not None and estimate > limit:
                self.is_capped = True
                return estimate
        bounded = qs.order_by()[: limit + 1].count()
        if bounded > limit:
            self.is_capped = True
            return limit
        return bounded
