"""The Django admin for entities: read-only, each entity's state and its recent operations.

An entity changes only through its operations (``durable.call_entity``...),
so the admin adds, changes and deletes nothing. Seeing it needs Django's
``durable.view_entity`` permission.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from durable.models import Entity, EntityOp
from durable_dashboard import payloads

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin

# Operations shown on an entity's page, newest first (its op log keeps up to its history).
RECENT_OPS = 50


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _error(error: Any) -> str:
    """An op's error as ``Type: message``, or as JSON when hidden (no message to show)."""
    if isinstance(error, dict) and "message" in error:
        return f"{error.get('type')}: {error.get('message')}"
    return _json(error)


@admin.register(Entity)
class EntityAdmin(_ModelAdmin):
    """Entities: name, key, operations applied, last change; the page shows the state and the recent ops."""

    list_display = ("name", "key", "ops", "updated_at")
    list_filter = ("name",)
    search_fields = ("key",)
    ordering = ("name", "key")
    fields = ("name", "key", "ops", "created_at", "updated_at", "state_json", "recent_ops")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        """The entity, its state replaced by what this user may see of it (durable.view_payloads)."""
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj.payloads_shown = payloads.can_view_payloads(request.user)
            payloads.redact([obj], ("state",), obj.payloads_shown)
        return obj

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="State")
    def state_json(self, obj: Entity) -> SafeString:
        return format_html("<pre>{}</pre>", _json(obj.state))

    @admin.display(description=f"Recent operations (newest {RECENT_OPS})")
    def recent_ops(self, obj: Entity) -> SafeString:
        rows = list(EntityOp.objects.filter(entity=obj).order_by("-seq")[:RECENT_OPS])
        payloads.redact(rows, ("arg", "result", "error"), getattr(obj, "payloads_shown", False))
        if not rows:
            return format_html("<em>{}</em>", "none")
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td><pre>{}</pre></td>"
            "<td><pre>{}</pre></td><td>{}</td></tr>",
            (
                (
                    op.seq,
                    op.op,
                    op.op_id,
                    op.status,
                    _json(op.arg),
                    _json(op.result) if op.error is None else _error(op.error),
                    op.created_at.isoformat(),
                )
                for op in rows
            ),
        )
        head = "<tr><th>#</th><th>op</th><th>op id</th><th>status</th><th>argument</th><th>result</th><th>at</th></tr>"
        return format_html("<table>{}{}</table>", SafeString(head), body)
