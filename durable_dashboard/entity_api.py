"""REST API on entities: ``GET entities/{name}/{key}/``, an entity's state and its recent operations.

Read-only (an entity changes only through its operations) and guarded by
``durable.view_entity``. A key nothing was applied to answers its
entity's initial state with ``ops`` 0; an entity name this process does not
know, and that has no row, is a JSON 404.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from durable import runtime
from durable.engine.entities import check_key
from durable_dashboard.api_base import JSONEndpoint, documented
from durable_dashboard.serializers import ErrorSerializer, PayloadJSONField

VIEW_ENTITIES = "durable.view_entity"
DEFAULT_OPS = 20
MAX_OPS = 1000


class CanViewEntities(BasePermission):
    """DRF: an authenticated, active user holding ``durable.view_entity``."""

    message = f"You do not have permission to view entities ({VIEW_ENTITIES})."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active and user.has_perm(VIEW_ENTITIES))


class EntityOpSerializer(serializers.Serializer[Any]):
    """One applied operation of the entity's op log."""

    seq = serializers.IntegerField()
    op_id = serializers.CharField()
    op = serializers.CharField()
    arg = PayloadJSONField()
    status = serializers.CharField(help_text="completed or failed")
    result = PayloadJSONField()
    error = PayloadJSONField()
    created_at = serializers.DateTimeField()


class EntitySerializer(serializers.Serializer[Any]):
    """An entity's state, how many operations it applied, and its newest operations (newest first)."""

    name = serializers.CharField()
    key = serializers.CharField()
    state = PayloadJSONField()
    ops = serializers.IntegerField(help_text="Operations applied to the key (the last one's position).")
    created_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField(allow_null=True)
    recent_ops = EntityOpSerializer(many=True)


def _ops_limit(request: Request) -> int:
    text = request.query_params.get("ops", str(DEFAULT_OPS))
    if not text.isdigit() or not 0 <= int(text) <= MAX_OPS:
        raise ValidationError({"detail": f"ops must be an integer from 0 to {MAX_OPS}, got {text!r}"})
    return int(text)


class EntityDetailView(JSONEndpoint, APIView):
    """``GET entities/{name}/{key}/?ops=20``: the entity's state and its newest ``ops`` operations."""

    permission_classes = [CanViewEntities]

    @documented(
        summary="An entity's state and recent operations",
        responses={200: EntitySerializer, 400: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, name: str, key: str) -> Response:
        limit = _ops_limit(request)
        key = check_key(name, key)  # InvalidInput: a JSON 400
        store = runtime.get_engine().store
        found = store.get_entity(name, key)
        if found is None:
            state = runtime.registry.get_entity(name).initial_state()  # EntityNotFound: a JSON 404
            row: dict[str, Any] = {"state": state, "ops": 0, "created_at": None, "updated_at": None}
        else:
            row = {"state": found.state, "ops": found.ops, "created_at": found.created_at}
            row["updated_at"] = found.updated_at
        recent = store.entity_ops(name, key, limit) if found is not None and limit else []
        data = {"name": name, "key": key, **row, "recent_ops": [op.__dict__ for op in recent]}
        return Response(EntitySerializer(data, context={"request": request}).data)
