"""REST API on limited step queues: ``queues/`` and ``queues/{name}/`` with pause and resume.

Thin: the request is shaped by a serializer, the limits themselves are
validated by :func:`durable.configure_queue` (a bad rate is a JSON 400), and
every write goes through :mod:`durable_dashboard.queue_ops` (audited).
Seeing queues needs ``durable.view_queue``; changing one ``durable.change_queue``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

import durable
from durable_dashboard import queue_ops
from durable_dashboard.api_base import JSONEndpoint, documented
from durable_dashboard.errors import STATUS_BY_CODE
from durable_dashboard.permissions import CanManageQueues
from durable_dashboard.serializers import AnyJSONField, ErrorSerializer, ValidationErrorSerializer


class LimitsSerializer(serializers.Serializer[Any]):
    """A queue's three limits (null: off)."""

    concurrency = serializers.IntegerField(allow_null=True)
    rate = serializers.CharField(allow_null=True)
    key_concurrency = serializers.IntegerField(allow_null=True)


class QueueSerializer(LimitsSerializer):
    """A limited queue as ``durable.QueueInfo.as_json`` shapes it: the limits in force first."""

    name = serializers.CharField()
    settings = LimitsSerializer()
    overrides = AnyJSONField(help_text="The stored overrides: the limits they name win over the settings.")
    paused = serializers.BooleanField()
    running = serializers.IntegerField(help_text="Steps holding a slot now.")
    waiting = serializers.IntegerField(help_text="Steps waiting for a slot.")
    oldest_waiting = serializers.CharField(allow_null=True)
    admitted_last_minute = serializers.IntegerField()
    updated_at = serializers.CharField(allow_null=True)


class QueueUpdateSerializer(serializers.Serializer[Any]):
    """``PATCH queues/{name}/``: the limits named are overridden (null turns one off); ``reset`` drops all first."""

    concurrency = AnyJSONField(help_text="A positive integer, or null (no limit).")
    rate = AnyJSONField(help_text='"20/s", "100/m", "5000/h", or null (no limit).')
    key_concurrency = AnyJSONField(help_text="A positive integer, or null (no limit).")
    reset = serializers.BooleanField(required=False, help_text="Drop every override (back to the settings) first.")


def _err(code: int, description: str) -> OpenApiResponse:
    return OpenApiResponse(ValidationErrorSerializer if code == 400 else ErrorSerializer, description=description)


ERRORS = {
    400: _err(400, "Invalid request (malformed JSON, wrong types, a bad limit)."),
    401: _err(401, "Not authenticated."),
    403: _err(403, "Missing permission."),
    404: _err(404, "No such limited queue."),
    413: _err(413, "Request body too large."),
    429: _err(429, "Throttled."),
}


def _answer(outcome: queue_ops.QueueOutcome) -> Response:
    if outcome.ok:
        return Response(outcome.result)
    code = outcome.code or "error"
    return Response({"detail": outcome.message, "code": code}, status=STATUS_BY_CODE.get(code, 400))


@extend_schema_view(
    list=documented(summary="List limited queues", responses={200: QueueSerializer(many=True), **ERRORS}),
    retrieve=documented(
        summary="A limited queue: limits, running, waiting", responses={200: QueueSerializer, **ERRORS}
    ),
)
class QueueViewSet(JSONEndpoint, viewsets.ViewSet):
    """Limited step queues (``DURABLE["QUEUES"]``): list, detail, change limits, pause, resume."""

    lookup_value_regex = "[^/]+"
    permission_classes = [CanManageQueues]
    serializer_class = QueueSerializer

    def queue_action(self) -> str | None:
        """The change this request makes (it needs ``durable.change_queue``), if any."""
        return {"partial_update": "configure_queue", "pause": "pause_queue", "resume": "resume_queue"}.get(
            self.action or ""
        )

    def list(self, request: Request) -> Response:
        return Response([info.as_json() for info in durable.list_queues()])

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(durable.get_queue(pk).as_json())

    @documented(
        summary="Change a queue's limits", request=QueueUpdateSerializer, responses={200: QueueSerializer, **ERRORS}
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        data = request.data
        if not isinstance(data, dict):
            raise ValidationError({"detail": "the request body must be a JSON object"})
        unknown = sorted(set(data) - set(QueueUpdateSerializer().fields))
        if unknown:
            raise ValidationError({"detail": f"unknown field(s) {unknown}: concurrency, rate, key_concurrency, reset"})
        serializer = QueueUpdateSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        params = {key: value for key, value in serializer.validated_data.items() if key in data}
        return _answer(queue_ops.perform("configure_queue", pk, params, user=request.user, via="api"))

    @documented(summary="Pause a queue (admits nothing)", request=None, responses={200: QueueSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        return _answer(queue_ops.perform("pause_queue", pk, {}, user=request.user, via="api"))

    @documented(summary="Resume a queue", request=None, responses={200: QueueSerializer, **ERRORS})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        return _answer(queue_ops.perform("resume_queue", pk, {}, user=request.user, via="api"))
