"""The Django admin for runs: a fast list, a detail page with a timeline, a summary, actions.

Runs, checkpoints and signals are read-only here. Operator actions (requeue,
redispatch, cancel, cancel with undo, retry with edited input, signal,
republish) go through :mod:`durable_dashboard.operations`, which calls
durable's service functions and writes the audit log. Each action is offered
only to users holding its permission (``durable_dashboard.<action>_run``), and
every page is limited to the user's namespaces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import CharField, QuerySet, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Substr
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from durable import runtime
from durable.exceptions import DurableError
from durable.models import ACTIVE, TERMINAL, CheckpointKind, Run, RunStatus
from durable_dashboard import admin_pages, conf, operations, payloads, summary, timeline
from durable_dashboard.admin_filters import (
    CreatedFilter,
    ErrorCodeFilter,
    NamespaceFilter,
    StaleFilter,
    StatusFilter,
    SupersededFilter,
    TagFilter,
    UpdatedFilter,
    VersionFilter,
    WorkflowFilter,
)
from durable_dashboard.filters import search, storable
from durable_dashboard.forms import form_for
from durable_dashboard.models import AuditEntry, NamespaceGrant
from durable_dashboard.paginator import EstimatedCountPaginator
from durable_dashboard.permissions import allowed_namespaces, can, visible_runs
from durable_dashboard.templatetags.durable_admin import dtime

#: Admin actions on runs, in menu order.
ADMIN_ACTIONS = ("continue", "requeue", "redispatch", "cancel", "cancel_compensate", "retry", "signal", "republish")
#: Statuses in which the detail page offers an action (bulk actions and the API report refusals instead).
OFFERED_WHEN = {
    "requeue": (RunStatus.FAILED, RunStatus.DEAD),
    "retry": (RunStatus.FAILED, RunStatus.DEAD),
    "redispatch": ACTIVE,
    "cancel": ACTIVE,
    "cancel_compensate": ACTIVE,
    "signal": ACTIVE,
    "republish": TERMINAL,
    "continue": ACTIVE,  # and only while paused at a breakpoint (offered_actions)
}
ERROR_PREVIEW = 80
ID_WIDTH = 24
LIST_FIELDS = ("id", "workflow", "version", "status", "namespace", "tags", "created_at", "started_at", "finished_at")


# ModelAdmin is generic in the type stubs only (Django's class takes no type arguments at
# run time); the mixins below are ModelAdmins to the type checker, plain mixins at run time.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
    _Mixin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin
    _Mixin = object


class ReadOnlyMixin(_Mixin):
    """No add, change or delete: rows change only through durable's service functions."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StorableQueryMixin(_Mixin):
    """A list URL whose filters or search hold control characters (NUL) shows the "invalid filter" page.

    PostgreSQL refuses NUL in text parameters; without this a crafted URL is a 500.
    """

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if any(not storable(v) for values in request.GET.lists() for v in values[1]):
            return HttpResponseRedirect(request.path + "?e=1")
        return super().changelist_view(request, extra_context)


def status_badge(status: str) -> str:
    return format_html('<span class="durable-badge durable-{}">{}</span>', status, status)


def report(request: HttpRequest, action: str, outcomes: list[operations.Outcome]) -> None:
    """Tell the operator what the action did, run by run (the first few of each kind)."""
    label = operations.LABELS[action]
    done = [o for o in outcomes if o.ok]
    failed = [o for o in outcomes if not o.ok]
    if done:
        text = gettext("%(label)s: done for %(count)d run(s). %(details)s")
        messages.success(request, text % {"label": label, "count": len(done), "details": _details(done)})
    if failed:
        text = gettext("%(label)s: failed for %(count)d run(s). %(details)s")
        messages.error(request, text % {"label": label, "count": len(failed), "details": _details(failed)})
    if not outcomes:
        messages.warning(request, gettext("%(label)s: no run selected.") % {"label": label})


def _details(outcomes: list[operations.Outcome], shown: int = 10) -> str:
    details = "; ".join(f"{o.run_id}: {o.message}" for o in outcomes[:shown])
    if len(outcomes) > shown:
        details += " " + gettext("(and %(count)d more)") % {"count": len(outcomes) - shown}
    return details


def lifecycle_context(run: Run, visible: QuerySet[Run]) -> dict[str, Any]:
    """What a run's lifecycle event did and still owes, and who starts whom for its workflow."""
    from durable.engine import lifecycle
    from durable.runtime import get_engine, registry

    record = run.lifecycle if isinstance(run.lifecycle, dict) else {}
    started = record.get("started", {})
    runs = {r.id: r for r in visible.filter(id__in=list(started.values())).only(*LIST_FIELDS)}
    triggered = [(sub, run_id, runs.get(run_id)) for sub, run_id in sorted(started.items())]
    engine = get_engine()
    starts = {ending: lifecycle.subscribers_for(engine, run.workflow, ending) for ending in lifecycle.ENDINGS}
    try:
        started_by = [e for e in registry.get_workflow(run.workflow).on_event if e.startswith("run.")]
    except DurableError:
        started_by = []
    return {
        "lifecycle_triggered": triggered,
        "lifecycle_owed": record.get("owed", []),
        "lifecycle_failed": sorted(record.get("failed", {}).items()),
        "lifecycle_skipped": record.get("skipped", []),
        "lifecycle_coalesced": sorted(record.get("coalesced", {})),
        "lifecycle_starts": starts,
        "lifecycle_started_by": started_by,
    }


def previous_in_chain(run_id: str) -> list[str]:
    """The id a continue-as-new predecessor of ``run_id`` would have (``x`` for ``x~1``, ``x~1`` for ``x~2``)."""
    base, _, counter = run_id.rpartition("~")
    if not base or not counter.isdigit():
        return []
    number = int(counter)
    return [base] if number <= 1 else [f"{base}~{number - 1}"]


class RunChangeList(ChangeList):
    """The run list loads only the columns it shows: of the error, its code and the start of its message."""

    durable_capped = False  # the paginator's count is a lower bound (see EstimatedCountPaginator)
    durable_live = False  # something on the page is active: the page refreshes itself

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Run]:
        queryset: QuerySet[Run] = super().get_queryset(request, exclude_parameters).only(*LIST_FIELDS)
        # The message is a payload: without durable.view_payloads only the code (kept in clear) shows.
        start = Substr(KT("error__message"), 1, ERROR_PREVIEW) if payloads.can_view_payloads(request.user) else None
        return queryset.annotate(
            error_code=KT("error__code"), error_start=Value(None, CharField()) if start is None else start
        )


def _bulk_action(action: str) -> Any:
    def run_action(modeladmin: RunAdmin, request: HttpRequest, queryset: QuerySet[Run]) -> Any:
        return modeladmin.bulk(request, queryset, action)

    run_action.__name__ = f"{action}_selected"
    description = format_lazy("{} ({})", operations.LABELS[action], _("selected runs"))
    return admin.action(description=description, permissions=[action])(run_action)


@admin.register(Run)
class RunAdmin(StorableQueryMixin, ReadOnlyMixin, _ModelAdmin):
    list_display = (
        "id_col",
        "status_col",
        "workflow",
        "error_col",
        "version",
        "namespace",
        "tags_col",
        "created_col",
        "duration_col",
    )
    list_display_links = ("id_col",)
    list_filter = (
        StatusFilter,
        StaleFilter,
        WorkflowFilter,
        NamespaceFilter,
        VersionFilter,
        TagFilter,
        ErrorCodeFilter,
        SupersededFilter,
        CreatedFilter,
        UpdatedFilter,
    )
    search_fields = ("id",)
    search_help_text = _("An exact run id, else a workflow name, else a tag.")
    ordering = ("-created_at",)
    sortable_by = ("id_col", "created_col")
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    list_per_page = 50
    list_max_show_all = 200
    actions = [_bulk_action(a) for a in ADMIN_ACTIONS]
    change_list_template = "durable_dashboard/admin/run_change_list.html"

    # -- permissions ---------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return visible_runs(request.user, super().get_queryset(request))

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Run], search_term: str) -> Any:
        return search(queryset, search_term), False

    # -- list columns -------------------------------------------------------------------
    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {"durable_can_start": can(request.user, "start"), "durable_live_interval": conf.get("LIVE_INTERVAL")}
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        cl = super().get_changelist_instance(request)
        if isinstance(cl, RunChangeList):
            cl.durable_capped = getattr(cl.paginator, "is_capped", False)
            cl.durable_live = any(run.status in ACTIVE for run in cl.result_list)
        return cl

    @admin.display(description=_("id"), ordering="id")
    def id_col(self, run: Run) -> str:
        short = run.id if len(run.id) <= ID_WIDTH else run.id[: ID_WIDTH - 1] + "…"
        return format_html('<span class="durable-id" title="{}">{}</span>', run.id, short)

    @admin.display(description=_("error"))
    def error_col(self, run: Run) -> str:
        code = getattr(run, "error_code", None)
        start = getattr(run, "error_start", None)
        if not code and not start:
            return ""
        return format_html('<span class="durable-err-cell" title="{}"><code>{}</code> {}</span>', start, code, start)

    @admin.display(description=_("created"), ordering="created_at")
    def created_col(self, run: Run) -> str:
        return dtime(run.created_at)

    @admin.display(description=_("status"), ordering="status")
    def status_col(self, run: Run) -> str:
        return status_badge(run.status)

    @admin.display(description=_("tags"))
    def tags_col(self, run: Run) -> str:
        return ", ".join(run.tags or [])

    @admin.display(description=_("duration"))
    def duration_col(self, run: Run) -> str:
        if not run.started_at:
            return ""
        return timeline.human((run.finished_at or runtime.now()) - run.started_at)

    # -- urls ---------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("summary/", wrap(self.summary_view), name="durable_run_summary"),
            path("start/", wrap(self.start_view), name="durable_run_start"),
            path("workers/", wrap(self.workers_view), name="durable_run_workers"),
            path("<path:object_id>/download/", wrap(self.download_view), name="durable_run_download"),
            path("<path:object_id>/act/<str:action>/", wrap(self.act_view), name="durable_run_act"),
            *super().get_urls(),
        ]

    # -- detail -------------------------------------------------------------------------
    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        run_id = unquote(object_id)
        run = self.get_queryset(request).filter(pk=run_id).first() if storable(run_id) else None
        if run is None:
            raise Http404("No run with that id (or not in your namespaces).")
        if not self.has_view_permission(request, run):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **self.detail_context(request, run),
            "opts": self.opts,
            "title": gettext("Run %(id)s") % {"id": run.id},
            "subtitle": None,
        }
        return TemplateResponse(request, "durable_dashboard/admin/run_detail.html", context)

    def detail_context(self, request: HttpRequest, run: Run) -> dict[str, Any]:
        visible = visible_runs(request.user)
        checkpoints = list(run.checkpoints.order_by("seq"))
        signals = list(run.buffered_signals.order_by("id"))
        shown = payloads.can_view_payloads(request.user)
        payloads.redact([run], payloads.RUN_PAYLOADS, shown)
        payloads.redact(checkpoints, payloads.CHECKPOINT_PAYLOADS, shown)
        payloads.redact(signals, ("payload",), shown)
        waiters = list(run.waiters.order_by("seq"))
        children = list(visible.filter(parent_id=run.id).only(*LIST_FIELDS).order_by("created_at")[:100])
        parent = visible.filter(id=run.parent_id).only(*LIST_FIELDS).first() if run.parent_id else None
        retry_of = visible.filter(id=run.retry_of).only(*LIST_FIELDS).first() if run.retry_of else None
        retries = list(visible.filter(retry_of=run.id).only(*LIST_FIELDS).order_by("created_at")[:50])
        forked_from = visible.filter(id=run.forked_from).only(*LIST_FIELDS).first() if run.forked_from else None
        forks = list(visible.filter(forked_from=run.id).only(*LIST_FIELDS, "forked_at_seq").order_by("created_at")[:50])
        continued_to_id = getattr(run, "continued_to", None)
        continued_to = visible.filter(id=continued_to_id).only(*LIST_FIELDS).first() if continued_to_id else None
        continued_from = (
            visible.filter(id__in=previous_in_chain(run.id), continued_to=run.id).only(*LIST_FIELDS).first()
        )
        now = runtime.now()
        error = run.error if isinstance(run.error, dict) else None
        waiting = timeline.waiting_on(run, checkpoints, waiters, children)
        return {
            "actions": self.offered_actions(request, run, waiting),
            "waiting_on": waiting,
            "paused_at": next((w["what"] for w in waiting if w["kind"] == CheckpointKind.BREAKPOINT), None),
            "audit_entries": admin_pages.run_audit(run.id),
            "run": run,
            "status_badge": status_badge(run.status),
            "is_active": run.status in ACTIVE,
            "input_json": timeline.pretty(run.input),
            "output_json": timeline.pretty(run.output),
            "error_json": timeline.pretty(timeline.without_tracebacks(error)) if error else None,
            "tracebacks": timeline.tracebacks(error) if error else [],
            "search_attributes_json": timeline.pretty(run.search_attributes),
            "checkpoints": [
                (cp, timeline.pretty(cp.output), timeline.pretty(cp.error), timeline.took(cp, now))
                for cp in checkpoints
            ],
            "live_interval": conf.get("LIVE_INTERVAL"),
            "timeline": timeline.build_timeline(run, checkpoints, now),
            "next_wake": timeline.next_wake(run, checkpoints),
            "buffered_signals": [(timeline.masked(sig.name), sig, timeline.pretty(sig.payload)) for sig in signals],
            "children": children,
            "parent": parent,
            "retry_of": retry_of,
            "retries": retries,
            "forked_from": forked_from,
            "forks": forks,
            "can_fork": run.status in TERMINAL and can(request.user, "fork"),
            "continued_to": continued_to,
            "continued_from": continued_from,
            **lifecycle_context(run, visible),
        }

    def offered_actions(self, request: HttpRequest, run: Run, waiting: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The actions this user may take on this run now; the signal form names the awaited signal."""
        awaited = next((w["what"] for w in waiting if w["kind"] == CheckpointKind.SIGNAL), None)
        # Retry offers the run's input to edit: only to whoever may see it.
        retry_input = run.input if payloads.can_view_payloads(request.user) else None
        initial = {"retry": {"input": retry_input}, "signal": {"name": awaited} if awaited else {}}
        return [
            {
                "name": action,
                "label": operations.LABELS[action],
                "form": form_for(action)(initial=initial.get(action, {})),
                "confirm": action in admin_pages.CONFIRMED,
            }
            for action in ADMIN_ACTIONS
            if run.status in OFFERED_WHEN[action]
            and can(request.user, action)
            and (action != "continue" or any(w["kind"] == CheckpointKind.BREAKPOINT for w in waiting))
        ]

    # -- actions and pages (durable_dashboard.admin_pages) -----------------------------------
    def act_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        return admin_pages.act_view(self, request, object_id, action)

    def bulk(self, request: HttpRequest, queryset: QuerySet[Run], action: str) -> Any:
        return admin_pages.bulk(self, request, queryset, action)

    def start_view(self, request: HttpRequest) -> HttpResponse:
        return admin_pages.start_view(self, request)

    def workers_view(self, request: HttpRequest) -> HttpResponse:
        return admin_pages.workers_view(self, request)

    def download_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return admin_pages.download_view(self, request, object_id)

    # -- summary ------------------------------------------------------------------------
    def summary_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        window = request.GET.get("window", "24h")
        allowed = allowed_namespaces(request.user)
        scope = "all" if allowed is None else ",".join(sorted(allowed))
        data = summary.cached(visible_runs(request.user), window, runtime.now(), scope)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("Runs: summary"),
            "data": data,
            "chart": summary.time_chart(data),
            "statuses": summary.status_chart(data),
            "windows": list(summary.WINDOWS),
        }
        return TemplateResponse(request, "durable_dashboard/admin/summary.html", context)


def _grant(action: str) -> Any:
    def has_permission(self: RunAdmin, request: HttpRequest) -> bool:
        return can(request.user, action)

    has_permission.__name__ = f"has_{action}_permission"
    return has_permission


for _action in ADMIN_ACTIONS:
    setattr(RunAdmin, f"has_{_action}_permission", _grant(_action))


@admin.register(AuditEntry)
class AuditEntryAdmin(StorableQueryMixin, ReadOnlyMixin, _ModelAdmin):
    list_display = ("created_at", "username", "via", "action", "runs_col", "reason", "ok")
    list_filter = ("via", "action", "ok")
    search_fields = ("username", "action")
    fields = (
        "created_at",
        "username",
        "user",
        "via",
        "action",
        "reason",
        "ok",
        "runs_list",
        "params",
        "results_table",
    )
    readonly_fields = fields
    show_full_result_count = False

    @admin.display(description=_("runs"))
    def runs_col(self, entry: AuditEntry) -> str:
        ids = entry.run_ids or []
        return ", ".join(ids[:3]) + (f" (+{len(ids) - 3})" if len(ids) > 3 else "")

    @admin.display(description=_("runs"))
    def runs_list(self, entry: AuditEntry) -> str:
        return ", ".join(entry.run_ids or [])

    @admin.display(description=_("results"))
    def results_table(self, entry: AuditEntry) -> str:
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((r.get("run_id"), "ok" if r.get("ok") else "failed", r.get("message")) for r in entry.results or []),
        )
        return format_html("<table><tr><th>run</th><th>result</th><th>message</th></tr>{}</table>", rows)


@admin.register(NamespaceGrant)
class NamespaceGrantAdmin(StorableQueryMixin, _ModelAdmin):
    list_display = ("namespace", "user", "group")
    list_filter = ("namespace",)
    search_fields = ("namespace", "user__username", "group__name")
    autocomplete_fields = ()


from durable_dashboard import entity_admin as entity_admin  # noqa: E402  (registers the entities pages)
from durable_dashboard import queue_admin as queue_admin  # noqa: E402  (registers the queues page)
from durable_dashboard import schedule_admin as schedule_admin  # noqa: E402  (registers the schedules page)
