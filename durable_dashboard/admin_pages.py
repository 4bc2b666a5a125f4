"""The admin's pages beyond list and detail: action confirmations, starting a run, workers, downloads.

Each page is a function of the :class:`~durable_dashboard.admin.RunAdmin` and
the request, wired in ``RunAdmin.get_urls``. Every change goes through
:mod:`durable_dashboard.operations` (audited, with the operator's reason).
Destructive actions (cancel, cancel with undo) and every bulk action show a
confirmation page first.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Min, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from durable import runtime
from durable.engine.vocab import UNSETTLED, CheckpointKind, CheckpointStatus
from durable.models import Checkpoint, Run
from durable.observability.tenancy import namespaces, worker_namespaces
from durable_dashboard import conf, operations, payloads
from durable_dashboard.filters import json_list_has, storable
from durable_dashboard.forms import StartForm, form_for
from durable_dashboard.models import AuditEntry
from durable_dashboard.permissions import can, namespace_allowed

if TYPE_CHECKING:
    from durable_dashboard.admin import RunAdmin

#: Single-run actions that ask "are you sure?" (with a reason) before they act.
CONFIRMED = ("cancel", "cancel_compensate", "fork")
#: Actions offered on one row of a run's timeline (a position), never in bulk.
ROW_ACTIONS = ("fork",)


def _context(admin: RunAdmin, request: HttpRequest, title: Any, **extra: Any) -> dict[str, Any]:
    return {**admin.admin_site.each_context(request), "opts": admin.opts, "title": title, **extra}


def _run_or_404(admin: RunAdmin, request: HttpRequest, object_id: str) -> Run:
    run_id = unquote(object_id)
    run = admin.get_queryset(request).filter(pk=run_id).first() if storable(run_id) else None
    if run is None:
        raise Http404(_("No run with that id (or not in your namespaces)."))
    return run


def _detail_url(run_id: str) -> str:
    return reverse("admin:durable_run_change", args=[quote(run_id)])


def _split(form: Any) -> tuple[dict[str, Any], str]:
    params = dict(form.cleaned_data)
    return params, params.pop("reason", "") or ""


def act_view(admin: RunAdmin, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
    """One action on one run: POST acts; GET shows the confirmation page of a destructive action."""
    from durable_dashboard.admin import ADMIN_ACTIONS, report

    if action not in ADMIN_ACTIONS and action not in ROW_ACTIONS:
        raise Http404(_("Unknown action."))
    if request.method not in ("POST", "GET") or (request.method == "GET" and action not in CONFIRMED):
        return HttpResponseNotAllowed(["POST"])
    run = _run_or_404(admin, request, object_id)
    if not can(request.user, action):
        raise PermissionDenied
    label = operations.LABELS[action]
    if request.method == "GET":
        context = _context(admin, request, label, run=run, action=action, form=_confirm_form(action, run, request))
        return TemplateResponse(request, "durable_dashboard/admin/confirm.html", context)
    form = form_for(action)(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{field}: {' '.join(map(str, errs))}" for field, errs in form.errors.items())
        messages.error(request, f"{label}: {errors}")
        return HttpResponseRedirect(_detail_url(run.id))
    params, reason = _split(form)
    outcomes = operations.perform(action, [run.id], params, user=request.user, via="admin", reason=reason)
    report(request, action, outcomes)
    for outcome in outcomes:
        new_id = outcome.result.get("new_run_id") if isinstance(outcome.result, dict) else None
        if new_id:
            return HttpResponseRedirect(_detail_url(new_id))
    return HttpResponseRedirect(_detail_url(run.id))


def _confirm_form(action: str, run: Run, request: HttpRequest) -> Any:
    """The confirmation page's form; a fork starts from the row's position and the run's input."""
    if action != "fork":
        return form_for(action)()
    shown = run.input if payloads.can_view_payloads(request.user) else None
    return form_for(action)(initial={"from_seq": request.GET.get("from_seq"), "input": shown})


def bulk(admin: RunAdmin, request: HttpRequest, queryset: QuerySet[Run], action: str) -> Any:
    """An admin action on the selected runs (bounded): a confirmation page (with its parameters) first."""
    from durable_dashboard.admin import report

    limit = int(conf.get("BULK_LIMIT"))
    run_ids = list(queryset.order_by("-created_at").values_list("id", flat=True)[: limit + 1])
    if len(run_ids) > limit:
        messages.warning(
            request, _("Only the newest %(limit)d of the selected runs were processed.") % {"limit": limit}
        )
        run_ids = run_ids[:limit]
    form_class = form_for(action)
    form = form_class(request.POST) if "apply" in request.POST else form_class()
    if not form.is_bound or not form.is_valid():
        context = _context(
            admin,
            request,
            operations.LABELS[action],
            action=f"{action}_selected",
            run_ids=run_ids,
            form=form,
            select_across=request.POST.get("select_across", "0"),
        )
        return TemplateResponse(request, "durable_dashboard/admin/action_form.html", context)
    params, reason = _split(form)
    outcomes = operations.perform(action, run_ids, params, user=request.user, via="admin", reason=reason)
    report(request, action, outcomes)
    return None


def start_view(admin: RunAdmin, request: HttpRequest) -> HttpResponse:
    """Start a run of a registered workflow; the validator's refusal is shown on the form."""
    if not can(request.user, "start"):
        raise PermissionDenied
    form = StartForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        params = form.params()
        namespace = params.get("namespace") or runtime.settings().default_namespace
        if not namespace_allowed(request.user, namespace):
            form.add_error("namespace", _("You may not start runs in namespace %(ns)s.") % {"ns": namespace})
        else:
            outcome = operations.start(params, user=request.user, via="admin")
            if outcome.ok:
                messages.success(request, _("Started run %(id)s.") % {"id": outcome.run_id})
                return HttpResponseRedirect(_detail_url(outcome.run_id))
            field = {"workflow_not_found": "workflow", "invalid_input": "input"}.get(outcome.code or "")
            if field == "input" and "run_id" in outcome.message:
                field = "run_id"
            form.add_error(field, outcome.message)
    return TemplateResponse(
        request, "durable_dashboard/admin/start.html", _context(admin, request, _("Start a run"), form=form)
    )


def download_view(admin: RunAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """The run (input, output, error, history) as a JSON file; ``?inline=1`` for copying."""
    run = _run_or_404(admin, request, object_id)
    response = JsonResponse(
        run_document(run, payloads.can_view_payloads(request.user)), json_dumps_params={"indent": 2, "sort_keys": True}
    )
    if not request.GET.get("inline"):
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in run.id)[:100]
        response["Content-Disposition"] = f'attachment; filename="run-{name}.json"'
    return response


def run_document(run: Run, shown: bool = False) -> dict[str, Any]:
    """Everything an operator needs to look at a run elsewhere; payloads only when ``shown`` (view_payloads)."""
    fields = (
        "id",
        "workflow",
        "version",
        "status",
        "namespace",
        "tags",
        "parent_id",
        "retry_of",
        "forked_from",
        "forked_at_seq",
        "continued_to",
    )
    times = ("created_at", "started_at", "finished_at", "updated_at", "wake_at")
    history_fields = ("seq", "name", "kind", "status", "attempts", "queue", "input", "output", "error")
    history_times = ("enqueued_at", "started_at", "finished_at")
    doc: dict[str, Any] = {name: getattr(run, name) for name in fields}
    doc.update({name: _iso(getattr(run, name)) for name in times})
    checkpoints = list(run.checkpoints.order_by("seq"))
    payloads.redact([run], payloads.RUN_PAYLOADS, shown)
    payloads.redact(checkpoints, payloads.CHECKPOINT_PAYLOADS, shown)
    doc.update(input=run.input, output=run.output, error=run.error, search_attributes=run.search_attributes)
    doc["history"] = [
        {
            **{name: getattr(cp, name) for name in history_fields},
            **{name: _iso(getattr(cp, name)) for name in history_times},
        }
        for cp in checkpoints
    ]
    plain: dict[str, Any] = json.loads(json.dumps(doc, default=str))
    return plain


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def run_audit(run_id: str, limit: int = 20) -> list[AuditEntry]:
    """The newest audit entries that name this run (who did what, with which reason)."""
    return list(json_list_has(AuditEntry.objects.all(), "run_ids", run_id)[:limit])


def queue_stats(now: datetime) -> list[dict[str, Any]]:
    """Per queue: pending and running dispatched steps, and how long the oldest pending one has waited."""
    rows = (
        Checkpoint.objects.filter(kind=CheckpointKind.STEP, status__in=UNSETTLED)
        .values("queue", "status")
        .annotate(count=Count("id"), oldest=Min("enqueued_at"))
    )
    queues: dict[str, dict[str, Any]] = {}
    default = "(default)"  # a step without a queue of its own goes to the transport's default
    for row in rows:
        entry = queues.setdefault(row["queue"] or default, {"pending": 0, "running": 0, "oldest": None})
        entry[str(row["status"])] = row["count"]
        if row["status"] == CheckpointStatus.PENDING and row["oldest"] is not None:
            entry["oldest"] = now - row["oldest"]
    return [{"queue": name, **values} for name, values in sorted(queues.items())]


def workers_view(admin: RunAdmin, request: HttpRequest) -> HttpResponse:
    """Live workers (queues, workflows, capabilities, version, last heartbeat) and the queues' backlog."""
    if not admin.has_view_permission(request):
        raise PermissionDenied
    engine = runtime.get_engine()
    now = engine.clock.now()
    workers = []
    for w in engine.store.live_workers(now):
        capabilities = {
            k: v for k, v in (w.get("capabilities") or {}).items() if k not in ("subscriptions", "namespaces")
        }
        scope = worker_namespaces(w)
        workers.append({**w, "age": now - w["heartbeat_at"], "capability_list": sorted(capabilities), "scope": scope})
    context = _context(
        admin,
        request,
        _("Workers and queues"),
        workers=workers,
        queues=queue_stats(now),
        # A user whose grants name namespaces sees only those (like the runs themselves).
        namespaces=[
            {"name": name, "state": state}
            for name, state in namespaces(engine, now).items()
            if namespace_allowed(request.user, name)
        ],
        now=now,
    )
    return TemplateResponse(request, "durable_dashboard/admin/workers.html", context)
