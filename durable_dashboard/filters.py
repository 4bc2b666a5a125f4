"""Run filters shared by the API list, bulk actions and the admin.

Each filter maps onto an index of :class:`durable.models.Run` (status,
namespace, workflow, created_at) or a primary-key lookup, so a filtered list
stays fast on millions of rows. ``tag`` uses JSON containment on PostgreSQL
and ``json_each`` on SQLite.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, cast

import django_filters
from django import forms
from django.db import connection
from django.db.models import QuerySet
from django_filters.fields import IsoDateTimeField

from durable.models import RUN_STATUS_CHOICES, Run
from durable.store.portable import run_reads

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def to_utc(value: datetime) -> datetime:
    """An aware date-time in UTC; ``ValueError`` when it leaves the calendar in UTC.

    Python accepts offsets up to ±23:59, PostgreSQL only about ±15:59, and year 1
    or 9999 cannot always be shifted to UTC: normalise before any query.
    """
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value.isoformat()} is out of range") from None


# django-filter ships no type information: its classes are Any to mypy, hence the
# targeted ignores on the classes below that extend them.
class UtcDateTimeField(IsoDateTimeField):  # type: ignore[misc]
    """An ISO 8601 date-time, cleaned to UTC (out of range: a validation error, not a 500)."""

    def to_python(self, value: Any) -> Any:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return to_utc(parsed)
        except ValueError as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):  # type: ignore[misc]
    """ISO 8601 date-time, compared in UTC."""

    field_class = UtcDateTimeField


def storable(value: str) -> bool:
    """False for text no run column can hold (NUL and other control characters)."""
    return not _CONTROL.search(value)


def json_list_has(queryset: QuerySet[Any], field: str, value: str) -> QuerySet[Any]:
    """Rows whose JSON list ``field`` holds ``value`` exactly (containment on PostgreSQL, ``json_each`` else)."""
    if connection.vendor == "postgresql":
        return queryset.filter(**{f"{field}__contains": [value]})
    table = queryset.model._meta.db_table
    column = queryset.model._meta.get_field(field).column
    return queryset.extra(  # parameterised
        where=[f'EXISTS (SELECT 1 FROM json_each("{table}"."{column}") WHERE json_each.value = %s)'], params=[value]
    )


def with_tag(queryset: QuerySet[Run], tag: str) -> QuerySet[Run]:
    """Runs whose ``tags`` list contains ``tag`` exactly (the store's lookup, which the tags index serves)."""
    return cast("QuerySet[Run]", run_reads.with_tag(queryset, tag))


def search(queryset: QuerySet[Run], term: str) -> QuerySet[Run]:
    """The run with that exact id; else the runs of that workflow; else the runs with that tag.

    One category at a time, so each is a single indexed lookup (an ``OR`` across the
    three would scan the whole table).
    """
    term = term.strip()
    if not term:
        return queryset
    if not storable(term):
        return queryset.none()
    by_id = queryset.filter(id=term)
    if by_id.exists():
        return by_id
    by_workflow = queryset.filter(workflow=term)
    if by_workflow.exists():
        return by_workflow
    return with_tag(queryset, term)


class StatusInFilter(django_filters.BaseInFilter, django_filters.ChoiceFilter):  # type: ignore[misc]
    """``?status=failed,dead``: one or more statuses, each validated."""


class RunFilter(django_filters.FilterSet):  # type: ignore[misc]
    """Query parameters of ``GET runs/`` (and the ``filter`` object of bulk actions)."""

    status = StatusInFilter(
        field_name="status",
        lookup_expr="in",
        choices=RUN_STATUS_CHOICES,
        help_text="One or more statuses, comma separated.",
    )
    workflow = django_filters.CharFilter(max_length=200)
    version = django_filters.NumberFilter(min_value=1, max_value=2**31 - 1)
    namespace = django_filters.CharFilter(max_length=100)
    tag = django_filters.CharFilter(method="filter_tag", max_length=100, help_text="Runs carrying this tag.")
    parent_id = django_filters.CharFilter(max_length=255)
    retry_of = django_filters.CharFilter(max_length=255)
    forked_from = django_filters.CharFilter(max_length=255)
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")
    updated_after = UtcDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = UtcDateTimeFilter(field_name="updated_at", lookup_expr="lt")
    q = django_filters.CharFilter(
        method="filter_search", max_length=255, help_text="An exact run id, else a workflow name, else a tag."
    )

    class Meta:
        model = Run
        fields: list[str] = []

    def filter_tag(self, queryset: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        return with_tag(queryset, value) if value else queryset

    def filter_search(self, queryset: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        return search(queryset, value)
