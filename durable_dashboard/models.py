"""Dashboard state: the audit log of operator actions and namespace grants.

Runs themselves live in :mod:`durable.models` and are only ever changed through
durable's service functions. This app adds two small tables:

* :class:`AuditEntry`: who did what to which runs, when, and with what result.
  Its ``Meta.permissions`` also declares one permission per operator action
  (``durable_dashboard.requeue_run``...), checked by the admin and the API alike.
* :class:`NamespaceGrant`: optional namespace scoping. A user who holds grants
  (directly or through a group) sees and acts on runs of those namespaces only.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone

#: Operator actions and their permission codenames (app label ``durable_dashboard``).
ACTION_PERMISSIONS: dict[str, tuple[str, str]] = {
    "start": ("start_run", "Can start runs"),
    "requeue": ("requeue_run", "Can requeue failed or dead runs"),
    "redispatch": ("redispatch_run", "Can redispatch pending steps"),
    "cancel": ("cancel_run", "Can cancel runs"),
    "cancel_compensate": ("cancel_compensate_run", "Can cancel runs with compensation (undo)"),
    "retry": ("retry_run", "Can retry runs with edited input"),
    "fork": ("fork_run", "Can rerun finished runs from a chosen position (fork)"),
    "signal": ("signal_run", "Can send signals to runs"),
    "update": ("update_run", "Can send updates to runs"),
    "republish": ("republish_run", "Can republish lifecycle events"),
    "continue": ("continue_run", "Can continue runs paused at a breakpoint"),
}
#: Operator actions on schedules (seeing them needs ``durable.view_schedule``).
SCHEDULE_PERMISSIONS: dict[str, tuple[str, str]] = {
    "create_schedule": ("create_schedule", "Can create schedules"),
    "update_schedule": ("edit_schedule", "Can edit schedules"),
    "delete_schedule": ("remove_schedule", "Can delete schedules"),
    "pause_schedule": ("pause_schedule", "Can pause and resume schedules"),
    "resume_schedule": ("pause_schedule", "Can pause and resume schedules"),
    "trigger_schedule": ("trigger_schedule", "Can trigger schedules (a run now)"),
    "backfill_schedule": ("backfill_schedule", "Can backfill schedules"),
}


class AuditEntry(models.Model):
    """One operator action (admin or API) on one or more runs, with its outcome."""

    VIA_CHOICES = (("admin", "admin"), ("api", "api"), ("cli", "command line"))

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    username = models.CharField(
        max_length=150, blank=True, help_text="Kept if the user is deleted; the OS user for the command line."
    )
    via = models.CharField(max_length=8, choices=VIA_CHOICES)
    action = models.CharField(max_length=32, db_index=True)
    run_ids = models.JSONField(default=list, blank=True)
    params = models.JSONField(default=dict, blank=True)
    results = models.JSONField(default=list, blank=True)
    ok = models.BooleanField(default=True, help_text="True when the action succeeded on every run.")
    reason = models.TextField(blank=True, default="", help_text="Why the operator did it (optional).")

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        permissions = [*ACTION_PERMISSIONS.values(), *dict.fromkeys(SCHEDULE_PERMISSIONS.values())]

    def __str__(self) -> str:
        count = len(self.run_ids or [])
        return f"{self.username or '?'} {self.action} on {count} run(s) at {self.created_at:%Y-%m-%d %H:%M:%S}"


class NamespaceGrant(models.Model):
    """Lets a user, or every member of a group, see and act on runs of ``namespace``.

    ``namespace="*"`` grants every namespace. Users with no grant at all are not
    restricted unless ``DURABLE_DASHBOARD["REQUIRE_NAMESPACE_GRANT"]`` is true.
    Superusers are never restricted.
    """

    namespace = models.CharField(max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="durable_namespaces"
    )
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="durable_namespaces")

    class Meta:
        ordering = ("namespace", "id")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True)
                | models.Q(user__isnull=True, group__isnull=False),
                name="durable_grant_user_xor_group",
            ),
        ]

    def __str__(self) -> str:
        who = f"user {self.user}" if self.user_id else f"group {self.group}"
        return f"{who} → {self.namespace}"
