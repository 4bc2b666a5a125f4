"""Who may see which runs, and who may do what to them.

Shared by the admin and the REST API so both enforce the same rules:

* Seeing runs needs Django's ``durable.view_run`` permission.
* Each operator action needs its own permission, ``durable_dashboard.<codename>``
  (see :data:`durable_dashboard.models.ACTION_PERMISSIONS`).
* Namespace scoping: :func:`allowed_namespaces` returns ``None`` (no limit) or the
  set of namespaces a user may see; runs elsewhere behave as if they did not exist.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from rest_framework.permissions import BasePermission

from durable.models import Run
from durable_dashboard import conf
from durable_dashboard.models import ACTION_PERMISSIONS, SCHEDULE_PERMISSIONS, NamespaceGrant

VIEW_PERMISSION = "durable.view_run"
VIEW_SCHEDULES = "durable.view_schedule"
VIEW_QUEUES = "durable.view_queue"
CHANGE_QUEUES = "durable.change_queue"


def action_permission(action: str) -> str:
    """The full permission name guarding ``action`` (``"durable_dashboard.cancel_run"``)."""
    return f"durable_dashboard.{ACTION_PERMISSIONS[action][0]}"


def can(user: Any, action: str) -> bool:
    """Whether ``user`` may perform ``action`` (and see runs at all)."""
    return bool(user and user.is_active and user.has_perm(VIEW_PERMISSION) and user.has_perm(action_permission(action)))


def schedule_permission(action: str) -> str:
    """The full permission name guarding schedule ``action`` (``"durable_dashboard.pause_schedule"``)."""
    return f"durable_dashboard.{SCHEDULE_PERMISSIONS[action][0]}"


def can_schedule(user: Any, action: str | None = None) -> bool:
    """Whether ``user`` may see schedules and, with ``action``, perform it."""
    if not (user and user.is_active and user.has_perm(VIEW_SCHEDULES)):
        return False
    return action is None or bool(user.has_perm(schedule_permission(action)))


def can_queue(user: Any, change: bool = False) -> bool:
    """Whether ``user`` may see limited queues and, with ``change``, change them (limits, pause)."""
    if not (user and user.is_active and user.has_perm(VIEW_QUEUES)):
        return False
    return not change or bool(user.has_perm(CHANGE_QUEUES))


def allowed_namespaces(user: Any) -> frozenset[str] | None:
    """Namespaces ``user`` may see, or ``None`` when not restricted. Cached on the user object."""
    cached: frozenset[str] | bool | None = getattr(user, "_durable_namespaces", False)
    if not isinstance(cached, bool):
        return cached
    result: frozenset[str] | None
    if not user or not user.is_authenticated:
        result = frozenset()
    elif user.is_superuser:
        result = None
    else:
        grants = set(
            NamespaceGrant.objects.filter(Q(user=user) | Q(group__in=user.groups.all())).values_list(
                "namespace", flat=True
            )
        )
        if "*" in grants:
            result = None
        elif grants or conf.get("REQUIRE_NAMESPACE_GRANT"):
            result = frozenset(grants)
        else:
            result = None
    user._durable_namespaces = result
    return result


def namespace_allowed(user: Any, namespace: str) -> bool:
    allowed = allowed_namespaces(user)
    return allowed is None or namespace in allowed


def visible_runs(user: Any, queryset: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """``queryset`` (default: all runs) limited to the namespaces ``user`` may see."""
    qs = Run.objects.all() if queryset is None else queryset
    allowed = allowed_namespaces(user)
    if allowed is None:
        return qs
    return qs.filter(namespace__in=sorted(allowed))


class CanViewRuns(BasePermission):
    """DRF: an authenticated, active user holding ``durable.view_run``."""

    message = "You do not have permission to view runs (durable.view_run)."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active and user.has_perm(VIEW_PERMISSION))


class CanManageSchedules(BasePermission):
    """DRF: ``durable.view_schedule``, and the permission of the view's schedule action, if any."""

    def has_permission(self, request: Any, view: Any) -> bool:
        action = view.schedule_action()
        if can_schedule(request.user, action):
            return True
        needed = schedule_permission(action) if action else VIEW_SCHEDULES
        self.message = f"You do not have permission to {(action or 'view_schedule').replace('_', ' ')}s ({needed})."
        return False


class CanManageQueues(BasePermission):
    """DRF: ``durable.view_queue``, and ``durable.change_queue`` for a change."""

    def has_permission(self, request: Any, view: Any) -> bool:
        change = view.queue_action() is not None
        if can_queue(request.user, change):
            return True
        needed = CHANGE_QUEUES if change else VIEW_QUEUES
        self.message = f"You do not have permission to {'change' if change else 'view'} queues ({needed})."
        return False


class CanPerformAction(BasePermission):
    """DRF: the permission of the view's current action (``view.durable_action(request)``)."""

    def has_permission(self, request: Any, view: Any) -> bool:
        action = view.durable_action(request)
        if action is None:
            return True
        if can(request.user, action):
            return True
        self.message = f"You do not have permission to {action.replace('_', ' ')} runs ({action_permission(action)})."
        return False
