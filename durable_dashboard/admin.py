"""Read-only admin views of runs and their checkpoints.

Runs are changed only through durable's service functions, never by editing
rows, so nothing here can be added, changed or deleted.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from durable.models import Checkpoint, Run


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CheckpointInline(ReadOnlyMixin, admin.TabularInline):
    model = Checkpoint
    extra = 0
    fields = ("seq", "kind", "name", "status", "attempts", "output", "error", "wake_at", "started_at", "finished_at")
    readonly_fields = fields
    show_change_link = False


@admin.register(Run)
class RunAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("id", "workflow", "version", "status", "namespace", "created_at", "finished_at")
    list_filter = ("status", "workflow", "namespace")
    search_fields = ("id", "workflow")
    readonly_fields = [f.name for f in Run._meta.fields]
    inlines = [CheckpointInline]
    show_full_result_count = False
    list_per_page = 50
