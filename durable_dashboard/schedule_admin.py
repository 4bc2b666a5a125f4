"""The Django admin for schedules: the list with next windows and last runs, forms, and the operator actions.

Every change goes through :mod:`durable_dashboard.schedule_ops` (durable's
service functions, audited); the ORM only reads. Each action is offered to the
users holding its permission (:data:`durable_dashboard.models.SCHEDULE_PERMISSIONS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from durable.models import Run
from durable.models import Schedule as ScheduleRow
from durable.schedules.info import ScheduleInfo
from durable.schedules.plan import ScheduleRecord
from durable_dashboard import schedule_ops
from durable_dashboard.permissions import can_schedule
from durable_dashboard.schedule_forms import BackfillForm, ScheduleForm

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin

_RECORD_FIELDS = list(ScheduleRecord.__dataclass_fields__)


def info_of(row: ScheduleRow) -> ScheduleInfo:
    """The row as the runtime API returns it (spec parsed, windows computed)."""
    return ScheduleInfo.from_record(ScheduleRecord(**{name: getattr(row, name) for name in _RECORD_FIELDS}))


def _report(request: HttpRequest, outcome: schedule_ops.ScheduleOutcome, action: str) -> None:
    label = schedule_ops.LABELS[action]
    if outcome.ok:
        messages.success(request, f"{label} {outcome.key}: {outcome.message}")
    else:
        messages.error(request, f"{label} {outcome.key} failed: {outcome.message}")


@admin.register(ScheduleRow)
class ScheduleAdmin(_ModelAdmin):
    """Schedules: key, workflow, spec in words, timezone, next five windows, last run, paused."""

    form = ScheduleForm

    class Media:
        css = {"all": ("durable_dashboard/dashboard.css",)}

    # paused right after the key: the state an operator looks for first stays on screen at any width
    list_display = ("key", "paused", "workflow", "spec_words", "timezone", "next_windows", "last_run", "tools")
    list_display_links = ("key",)
    list_filter = ("paused", "origin")
    search_fields = ("key", "workflow")
    actions = ["pause_selected", "resume_selected", "trigger_selected"]
    show_full_result_count = False

    # -- permissions: seeing needs durable.view_schedule, each write its own -------------------
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_schedule(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_schedule(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return can_schedule(request.user, "create_schedule")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_schedule(request.user, "update_schedule")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_schedule(request.user, "delete_schedule")

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return can_schedule(request.user, "pause_schedule")

    def has_trigger_permission(self, request: HttpRequest) -> bool:
        return can_schedule(request.user, "trigger_schedule")

    # -- columns --------------------------------------------------------------------------
    @admin.display(description="spec")
    def spec_words(self, row: ScheduleRow) -> str:
        return info_of(row).description

    @admin.display(description="timezone")
    def timezone(self, row: ScheduleRow) -> str:
        return str((row.spec or {}).get("timezone", "UTC"))

    @admin.display(description="next windows (UTC)")
    def next_windows(self, row: ScheduleRow) -> str:
        if row.paused:
            return "paused"
        upcoming = info_of(row).upcoming(5)
        if not upcoming:
            return "ended"
        return format_html_join(
            "",
            "<div><time>{}</time></div>",
            ((w.strftime("%Y-%m-%d %H:%M" if not w.second else "%Y-%m-%d %H:%M:%S"),) for w in upcoming),
        )

    @admin.display(description="last run")
    def last_run(self, row: ScheduleRow) -> str:
        if not row.last_run_id:
            return "none"
        status = Run.objects.filter(id=row.last_run_id).values_list("status", flat=True).first() or "gone"
        url = reverse("admin:durable_run_change", args=[quote(row.last_run_id)])
        return format_html(
            '<a class="durable-short" href="{}" title="{}">{}</a> <span class="durable-status">{}</span>',
            url,
            row.last_run_id,
            row.last_run_id,
            status,
        )

    @admin.display(description="")
    def tools(self, row: ScheduleRow) -> str:
        url = reverse("admin:durable_schedule_backfill", args=[quote(row.key)])
        return format_html('<a href="{}">Backfill…</a>', url)

    # -- writes through the service functions ---------------------------------------------------
    def save_model(self, request: HttpRequest, obj: ScheduleRow, form: Any, change: bool) -> None:
        params = form.audit_params()
        if change:
            action, params = "update_schedule", {**params, "workflow": form.cleaned_data["workflow"]}
        else:
            action, params = "create_schedule", {**params, "workflow": form.cleaned_data["workflow"]}
        _report(request, schedule_ops.perform(action, obj.key, params, user=request.user, via="admin"), action)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        return None

    def delete_model(self, request: HttpRequest, obj: ScheduleRow) -> None:
        outcome = schedule_ops.perform("delete_schedule", obj.key, {}, user=request.user, via="admin")
        _report(request, outcome, "delete_schedule")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ScheduleRow]) -> None:
        for row in queryset:
            self.delete_model(request, row)

    # -- actions on the selected schedules ------------------------------------------------------
    def _each(self, request: HttpRequest, queryset: QuerySet[ScheduleRow], action: str) -> None:
        for key in queryset.values_list("key", flat=True):
            _report(request, schedule_ops.perform(action, key, {}, user=request.user, via="admin"), action)

    @admin.action(description="Pause the selected schedules", permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[ScheduleRow]) -> None:
        self._each(request, queryset, "pause_schedule")

    @admin.action(description="Resume the selected schedules", permissions=["pause"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[ScheduleRow]) -> None:
        self._each(request, queryset, "resume_schedule")

    @admin.action(description="Trigger the selected schedules now (one run each)", permissions=["trigger"])
    def trigger_selected(self, request: HttpRequest, queryset: QuerySet[ScheduleRow]) -> None:
        self._each(request, queryset, "trigger_schedule")

    # -- backfill: a page of its own ----------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        extra = [
            path(
                "<path:object_id>/backfill/",
                self.admin_site.admin_view(self.backfill_view),
                name="durable_schedule_backfill",
            )
        ]
        return extra + super().get_urls()

    def backfill_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        key = unquote(object_id)
        if not ScheduleRow.objects.filter(key=key).exists():
            raise Http404("No schedule with that key.")
        if not can_schedule(request.user, "backfill_schedule"):
            raise PermissionDenied
        form = BackfillForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            params = {name: form.cleaned_data[name].isoformat() for name in ("start", "end")}
            outcome = schedule_ops.perform("backfill_schedule", key, params, user=request.user, via="admin")
            _report(request, outcome, "backfill_schedule")
            if outcome.ok:
                return HttpResponseRedirect(reverse("admin:durable_schedule_changelist"))
            form.add_error(None, outcome.message)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Backfill {key}",
            "key": key,
            "form": form,
        }
        return TemplateResponse(request, "durable_dashboard/admin/schedule_backfill.html", context)
