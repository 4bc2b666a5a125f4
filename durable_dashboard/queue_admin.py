"""The Django admin for limited step queues: each queue's limits and figures, a limits form, pause and resume.

Every change goes through :mod:`durable_dashboard.queue_ops` (durable's
service functions, audited); the page reads :func:`durable.list_queues`.
Seeing it needs ``durable.view_queue``, a change ``durable.change_queue``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

import durable
from durable.exceptions import QueueNotFound
from durable.models import Queue as QueueRow
from durable_dashboard import queue_ops
from durable_dashboard.permissions import can_queue

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin

SETTINGS = "settings"
OFF = "off"
LIMIT_HELP = "Empty: the settings' value. 'off': no limit, whatever the settings say."


class QueueLimitsForm(forms.Form):
    """The overrides of one queue: each limit as the settings give it, overridden, or off."""

    concurrency = forms.CharField(required=False, help_text=LIMIT_HELP)
    rate = forms.CharField(required=False, help_text='"20/s", "100/m", "5000/h". ' + LIMIT_HELP)
    key_concurrency = forms.CharField(required=False, help_text=LIMIT_HELP)

    @classmethod
    def initial_of(cls, overrides: dict[str, Any]) -> dict[str, str]:
        return {name: OFF if value is None else str(value) for name, value in overrides.items()}

    def overrides(self) -> dict[str, Any]:
        """The overrides as ``durable.configure_queue`` takes them (its validation decides)."""
        found: dict[str, Any] = {}
        for name in ("concurrency", "rate", "key_concurrency"):
            text = (self.cleaned_data.get(name) or "").strip()
            if not text:
                continue
            if text.lower() == OFF:
                found[name] = None
            elif name != "rate":
                try:
                    found[name] = int(text)
                except ValueError:
                    found[name] = text  # refused by durable with a clear message
            else:
                found[name] = text
        return found


def _report(request: HttpRequest, outcome: queue_ops.QueueOutcome, action: str) -> None:
    label = queue_ops.LABELS[action]
    if outcome.ok:
        messages.success(request, f"{label} {outcome.name}: {outcome.message}")
    else:
        messages.error(request, f"{label} {outcome.name} failed: {outcome.message}")


@admin.register(QueueRow)
class QueueAdmin(_ModelAdmin):
    """Limited queues: limits in force (and from where), running, waiting, oldest waiting, admitted per minute."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_queue(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_queue(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_queue(request.user, change=True)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def _context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, "title": title}

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_change_permission(request):
                raise PermissionDenied
            action = {"pause": "pause_queue", "resume": "resume_queue"}.get(request.POST.get("do", ""))
            if action is not None:
                name = request.POST.get("queue", "")
                _report(request, queue_ops.perform(action, name, {}, user=request.user, via="admin"), action)
            return HttpResponseRedirect(request.get_full_path())
        rows = [
            {
                "info": info,
                "limits": [
                    (name, value, name in info.overrides, info.settings[name]) for name, value in info.limits.items()
                ],
            }
            for info in durable.list_queues()
        ]
        context = {
            **self._context(request, "Queues"),
            "queues": rows,
            "can_change": self.has_change_permission(request),
        }
        return TemplateResponse(request, "durable_dashboard/admin/queues.html", context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        name = unquote(object_id)
        try:
            info = durable.get_queue(name)
        except QueueNotFound as exc:
            raise Http404(str(exc)) from exc
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = QueueLimitsForm(request.POST or None, initial=QueueLimitsForm.initial_of(info.overrides))
        if request.method == "POST":
            if not self.has_change_permission(request):
                raise PermissionDenied
            if form.is_valid():
                params = {"reset": True, **form.overrides()}
                outcome = queue_ops.perform("configure_queue", name, params, user=request.user, via="admin")
                _report(request, outcome, "configure_queue")
                if outcome.ok:
                    return HttpResponseRedirect(reverse("admin:durable_queue_changelist"))
                form.add_error(None, outcome.message)
        context = {
            **self._context(request, f"Limits of queue {name}"),
            "queue": info,
            "form": form,
            "can_change": self.has_change_permission(request),
        }
        return TemplateResponse(request, "durable_dashboard/admin/queue_limits.html", context)
