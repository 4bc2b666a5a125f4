"""Admin list filters on runs, each backed by an index or a cheap lookup.

No filter runs ``SELECT DISTINCT`` over the runs table to build its choices:
statuses come from the model, workflows from the registry, and namespace,
version, tag and time ranges are typed in.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext_lazy as _

from durable.models import RUN_STATUS_CHOICES, Run, RunStatus
from durable.observability.snapshot import STALE_KINDS, stale_runs
from durable.runtime import registry
from durable_dashboard.filters import storable, to_utc, with_tag

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


class StatusFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, StrOrPromise]]:
        return list(RUN_STATUS_CHOICES)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(status=self.value()) if self.value() else queryset


class StaleFilter(admin.SimpleListFilter):
    """Stuck runs, as the health check sees them (thresholds ``HEALTH_STALE_AFTER``, ``HEALTH_MAX_STEP_WAIT``)."""

    title = "stale"
    parameter_name = "stale"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(kind, kind.replace("_", " ")) for kind in STALE_KINDS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        if self.value() not in STALE_KINDS:
            return queryset
        return queryset.filter(id__in=stale_runs(str(self.value())).values("id"))


class SupersededFilter(admin.SimpleListFilter):
    """Hide (or show only) the runs a retry with input or a fork has superseded (both lookups are indexed)."""

    title = _("superseded")
    parameter_name = "superseded"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, StrOrPromise]]:
        return [("hide", _("Hide runs retried or forked")), ("only", _("Only runs retried or forked"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        superseded = Q(Exists(Run.objects.filter(retry_of=OuterRef("id")))) | Q(
            Exists(Run.objects.filter(forked_from=OuterRef("id")))
        )
        if self.value() == "hide":
            return queryset.exclude(superseded)
        if self.value() == "only":
            return queryset.filter(superseded)
        return queryset


class WorkflowFilter(admin.SimpleListFilter):
    """Registered workflows (names known to this process)."""

    title = _("workflow")
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = sorted({wf.name for wf in registry.workflows()})
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(workflow=self.value()) if self.value() else queryset


class InputFilter(admin.SimpleListFilter):
    """A free-text filter (one input box)."""

    template = "durable_dashboard/admin/input_filter.html"
    placeholder = ""

    def value(self) -> Any:
        value = super().value()
        if value and not storable(value):
            raise IncorrectLookupParameters(f"{self.title} may not contain control characters")
        return value

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("", "")]  # has_output() needs one choice

    def choices(self, changelist: Any) -> Any:
        others = {k: v for k, v in changelist.get_filters_params().items() if k != self.parameter_name}
        yield {
            "parameter_name": self.parameter_name,
            "value": self.value() or "",
            "placeholder": self.placeholder,
            "others": [(k, item) for k, v in others.items() for item in (v if isinstance(v, list) else [v])],
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }


class NamespaceFilter(InputFilter):
    title = _("namespace")
    parameter_name = "namespace"
    placeholder = "default"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(namespace=self.value()) if self.value() else queryset


class VersionFilter(InputFilter):
    title = _("version")
    parameter_name = "version"
    placeholder = "1"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit() or len(value) > 9:
            raise IncorrectLookupParameters("version must be a positive integer")
        return queryset.filter(version=int(value))


class TagFilter(InputFilter):
    title = _("tag")
    parameter_name = "tag"
    placeholder = "a tag"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return with_tag(queryset, self.value()) if self.value() else queryset


class ErrorCodeFilter(InputFilter):
    """Failed and dead runs whose error has this code (``declined``, ``step_failed``...)."""

    title = _("error code")
    parameter_name = "error_code"
    placeholder = "step_failed"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(status__in=(RunStatus.FAILED, RunStatus.DEAD), error__code=value)


def _parse_when(value: str) -> datetime:
    try:
        when = parse_datetime(value)
    except ValueError:
        raise IncorrectLookupParameters(f"not a date or date-time: {value!r}") from None
    if when is None:
        try:
            day = parse_date(value)
        except ValueError:
            day = None
        if day is None:
            raise IncorrectLookupParameters(f"not a date or date-time: {value!r}")
        when = datetime(day.year, day.month, day.day)
    try:
        if timezone.is_naive(when):
            when = timezone.make_aware(when)
        return to_utc(when)
    except (ValueError, OverflowError) as exc:
        raise IncorrectLookupParameters(str(exc)) from None


def _local_input(value: str) -> str:
    """A filter value as a ``datetime-local`` input shows it (a date alone is its midnight)."""
    try:
        is_day = len(value) == 10 and parse_date(value) is not None
    except ValueError:
        is_day = False
    return f"{value}T00:00" if is_day else value


class RangeFilter(admin.ListFilter):
    """``<field>__gte`` / ``<field>__lt`` typed as dates or date-times."""

    template = "durable_dashboard/admin/range_filter.html"
    field_name = ""

    def __init__(self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        self.values: dict[str, str] = {}
        for key in self.expected_parameters():
            if key in params:
                value = params.pop(key)
                self.values[key] = (value[-1] if isinstance(value, list) else value) or ""

    @property
    def since(self) -> str:
        return f"{self.field_name}__gte"

    @property
    def until(self) -> str:
        return f"{self.field_name}__lt"

    def expected_parameters(self) -> list[str | None]:
        return [self.since, self.until]

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        lookups = {key: _parse_when(value) for key, value in self.values.items() if value}
        return queryset.filter(**lookups) if lookups else queryset

    def choices(self, changelist: Any) -> Any:
        params = self.expected_parameters()
        others = {k: v for k, v in changelist.get_filters_params().items() if k not in params}
        yield {
            "since_name": self.since,
            "until_name": self.until,
            "since": _local_input(self.values.get(self.since, "")),
            "until": _local_input(self.values.get(self.until, "")),
            "timezone": timezone.get_current_timezone_name(),
            "others": [(k, item) for k, v in others.items() for item in (v if isinstance(v, list) else [v])],
            "clear_url": changelist.get_query_string(remove=params),
        }


class CreatedFilter(RangeFilter):
    title = _("created")
    field_name = "created_at"


class UpdatedFilter(RangeFilter):
    title = _("updated")
    field_name = "updated_at"
