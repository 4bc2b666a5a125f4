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
from typing import TYPE_CHECKING, Any

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet

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


# Generic in the type stubs only (Django's class takes no type arguments at run time).
if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:
    _Paginator = Paginator


class EstimatedCountPaginator(_Paginator):
    """See the module docstring."""

    is_capped = False

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        limit = int(conf.get("COUNT_LIMIT"))
        if not isinstance(qs, QuerySet):
            return len(qs)
        if not qs.query.where:
            estimate = estimated_rows(qs.model._meta.db_table, qs.db)
            if estimate is not None and estimate > limit:
                self.is_capped = True
                return estimate
        bounded: int = qs.order_by()[: limit + 1].count()
        if bounded > limit:
            self.is_capped = True
            return limit
        return bounded
