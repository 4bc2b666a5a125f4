"""REST API on schedules: ``schedules/`` and ``schedules/{key}/`` with pause, resume, trigger, backfill.

Thin: the request is shaped by a serializer, the spec itself is validated by
:class:`durable.Schedule` (a bad cron expression or timezone is a JSON 400),
and every write goes through :mod:`durable_dashboard.schedule_ops` (audited).
Seeing schedules needs ``durable.view_schedule``; each write its own
permission (:data:`durable_dashboard.models.SCHEDULE_PERMISSIONS`).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

import durable
from durable.schedules.spec import MAX_WINDOWS, Overlap
from durable_dashboard import schedule_ops
from durable_dashboard.api_base import JSONEndpoint, documented
from durable_dashboard.errors import STATUS_BY_CODE
from durable_dashboard.permissions import CanManageSchedules
from durable_dashboard.serializers import (
    NAME,
    AnyJSONField,
    ErrorSerializer,
    StrictCharField,
    StrictIntegerField,
    StrictRegexField,
    ValidationErrorSerializer,
)

KEY = r"^[^\s@\x00-\x1f\x7f]{1,200}$"


class ScheduleSerializer(serializers.Serializer[Any]):
    """A schedule as ``durable.ScheduleInfo.as_dict`` shapes it."""

    key = serializers.CharField()
    workflow = serializers.CharField()
    every = serializers.FloatField(allow_null=True)
    cron = serializers.CharField(allow_null=True)
    timezone = serializers.CharField()
    input = AnyJSONField()
    overlap = serializers.ChoiceField(choices=[o.value for o in Overlap])
    jitter = serializers.FloatField(allow_null=True)
    catch_up = serializers.IntegerField()
    start_at = serializers.CharField(allow_null=True)
    end_at = serializers.CharField(allow_null=True)
    paused = serializers.BooleanField()
    origin = serializers.CharField()
    description = serializers.CharField()
    next_window = serializers.CharField(allow_null=True)
    upcoming = serializers.ListField(child=serializers.CharField())
    last_run_id = serializers.CharField(allow_null=True)
    last_window = serializers.CharField(allow_null=True)
    skipped = serializers.IntegerField()
    buffered = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    updated_at = serializers.CharField()


class SpecFields(serializers.Serializer[Any]):
    """The spec's fields as a request carries them; durable.Schedule validates their values."""

    every = AnyJSONField(required=False, help_text='A duration: "15m", "1h30m" or seconds.')
    cron = StrictCharField(max_length=200, required=False, allow_null=True)
    timezone = StrictCharField(max_length=64, required=False)
    input = AnyJSONField(required=False)
    overlap = serializers.ChoiceField(choices=[o.value for o in Overlap], required=False)
    jitter = AnyJSONField(required=False, help_text="A duration, or null.")
    catch_up = StrictIntegerField(min_value=1, max_value=MAX_WINDOWS, required=False)
    start_at = StrictCharField(max_length=64, required=False, allow_null=True, help_text="ISO 8601 with an offset.")
    end_at = StrictCharField(max_length=64, required=False, allow_null=True, help_text="ISO 8601 with an offset.")


class ScheduleCreateSerializer(SpecFields):
    """``POST schedules/``."""

    key = StrictRegexField(KEY, max_length=200)
    workflow = StrictRegexField(NAME, max_length=200)
    paused = serializers.BooleanField(required=False)


class ScheduleUpdateSerializer(SpecFields):
    """``PATCH schedules/{key}/``."""

    workflow = StrictRegexField(NAME, max_length=200, required=False)


class BackfillSerializer(serializers.Serializer[Any]):
    """``POST schedules/{key}/backfill/``: every window in ``[start, end]`` (at most 1,000)."""

    start = StrictCharField(max_length=64, help_text="ISO 8601 with an offset.")
    end = StrictCharField(max_length=64, help_text="ISO 8601 with an offset.")


class RunIdsSerializer(serializers.Serializer[Any]):
    run_ids = serializers.ListField(child=serializers.CharField())


def _err(code: int, description: str) -> OpenApiResponse:
    return OpenApiResponse(ValidationErrorSerializer if code == 400 else ErrorSerializer, description=description)


ERRORS = {
    400: _err(400, "Invalid request (malformed JSON, wrong types, a bad spec)."),
    401: _err(401, "Not authenticated."),
    403: _err(403, "Missing permission."),
    404: _err(404, "No such schedule."),
    413: _err(413, "Request body too large."),
    429: _err(429, "Throttled."),
}
WRITE_ERRORS = {**ERRORS, 409: _err(409, "The schedule exists, or kept changing under the write.")}


def _answer(outcome: schedule_ops.ScheduleOutcome, ok_status: int = status.HTTP_200_OK) -> Response:
    if outcome.ok:
        return Response(outcome.result, status=ok_status)
    code = outcome.code or "error"
    return Response({"detail": outcome.message, "code": code}, status=STATUS_BY_CODE.get(code, 400))


@extend_schema_view(
    list=documented(summary="List schedules", responses={200: ScheduleSerializer(many=True), **ERRORS}),
    retrieve=documented(summary="A schedule and its next windows", responses={200: ScheduleSerializer, **ERRORS}),
)
class ScheduleViewSet(JSONEndpoint, viewsets.ViewSet):
    """Schedules: list, detail, create, edit, delete, and the operator actions."""

    lookup_value_regex = "[^/]+"
    permission_classes = [CanManageSchedules]
    serializer_class = ScheduleSerializer

    def schedule_action(self) -> str | None:
        """The schedule action this request performs (its permission is checked), if any."""
        return {
            "create": "create_schedule",
            "partial_update": "update_schedule",
            "destroy": "delete_schedule",
            "pause": "pause_schedule",
            "resume": "resume_schedule",
            "trigger": "trigger_schedule",
            "backfill": "backfill_schedule",
        }.get(self.action or "")

    @staticmethod
    def _valid(serializer_class: type[Any], data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ValidationError({"detail": "the request body must be a JSON object"})
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def _act(self, request: Request, name: str, pk: str, params: dict[str, Any]) -> Response:
        return _answer(schedule_ops.perform(name, pk, params, user=request.user, via="api"))

    def list(self, request: Request) -> Response:
        return Response([info.as_dict() for info in durable.list_schedules()])

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(durable.get_schedule(pk).as_dict())

    @documented(
        summary="Create a schedule",
        request=ScheduleCreateSerializer,
        responses={201: OpenApiResponse(ScheduleSerializer, description="Created."), **WRITE_ERRORS},
    )
    def create(self, request: Request) -> Response:
        data = self._valid(ScheduleCreateSerializer, request.data)
        key = data.pop("key")
        outcome = schedule_ops.perform("create_schedule", key, data, user=request.user, via="api")
        return _answer(outcome, status.HTTP_201_CREATED)

    @documented(
        summary="Edit a schedule's spec",
        request=ScheduleUpdateSerializer,
        responses={200: ScheduleSerializer, **WRITE_ERRORS},
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        return self._act(request, "update_schedule", pk, self._valid(ScheduleUpdateSerializer, request.data))

    @documented(summary="Delete a schedule (its runs stay)", responses={204: None, **WRITE_ERRORS})
    def destroy(self, request: Request, pk: str) -> Response:
        outcome = schedule_ops.perform("delete_schedule", pk, {}, user=request.user, via="api")
        return Response(status=status.HTTP_204_NO_CONTENT) if outcome.ok else _answer(outcome)

    @documented(summary="Pause a schedule", request=None, responses={200: ScheduleSerializer, **WRITE_ERRORS})
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        return self._act(request, "pause_schedule", pk, {})

    @documented(summary="Resume a schedule", request=None, responses={200: ScheduleSerializer, **WRITE_ERRORS})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        return self._act(request, "resume_schedule", pk, {})

    @documented(
        summary="Start one run now, outside the windows",
        request=None,
        responses={200: RunIdsSerializer, **WRITE_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def trigger(self, request: Request, pk: str) -> Response:
        return self._act(request, "trigger_schedule", pk, {})

    @documented(
        summary="Start every window in a range (at most 1,000), each once",
        request=BackfillSerializer,
        responses={200: RunIdsSerializer, **WRITE_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, pk: str) -> Response:
        return self._act(request, "backfill_schedule", pk, self._valid(BackfillSerializer, request.data))
