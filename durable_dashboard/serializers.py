"""Request validation and response shapes of the REST API.

Serializers validate everything a client sends (types, lengths, JSON shapes)
before a service function is called; the service functions then apply the
engine's own rules (known workflow, payload size, run state).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from durable.codecs.fields import PayloadField
from durable.models import (
    ACTIVE,
    Admission,
    BufferedSignal,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    Run,
    SignalWaiter,
)
from durable.queues import step_wait_reason
from durable_dashboard import conf, payloads
from durable_dashboard.filters import RunFilter
from durable_dashboard.timeline import masked

RUN_ID = r"^[^\s\x00-\x1f\x7f]{1,255}$"
NAME = r"^[^\s\x00-\x1f\x7f]{1,200}$"


class AnyJSONField(serializers.JSONField):
    """Any JSON value (object, array, string, number, boolean or null)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)


@extend_schema_field(OpenApiTypes.ANY)
class PayloadJSONField(AnyJSONField):
    """A payload: its value to users with ``durable.view_payloads``, else ``{"hidden": true, "bytes": N}``.

    The user is the request's in the serializer's context; without one, payloads are hidden.
    """

    def to_representation(self, value: Any) -> Any:
        request = self.context.get("request")
        visible = payloads.can_view_payloads(getattr(request, "user", None))
        return payloads.shown(value, visible, error=self.field_name == "error")


class PayloadColumns:
    """ModelSerializer mixin: the model's payload columns are :class:`PayloadJSONField`."""

    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping, PayloadField: PayloadJSONField}


class StrictRegexField(serializers.RegexField):
    """A string matching a pattern; numbers and other types are refused, not coerced."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("Not a valid string.", code="invalid")
        return str(super().to_internal_value(data))


class StrictCharField(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("Not a valid string.", code="invalid")
        return str(super().to_internal_value(data))


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError("A valid integer is required.", code="invalid")
        return int(super().to_internal_value(data))


# -- responses -------------------------------------------------------------------------


class RunSerializer(PayloadColumns, serializers.ModelSerializer[Run]):
    """A run as listed: no payloads."""

    class Meta:
        model = Run
        fields: tuple[str, ...] = (
            "id",
            "workflow",
            "version",
            "status",
            "namespace",
            "tags",
            "priority",
            "parent_id",
            "retry_of",
            "forked_from",
            "forked_at_seq",
            "singleton_key",
            "wake_at",
            "recovery_attempts",
            "created_at",
            "updated_at",
            "started_at",
            "finished_at",
        )
        read_only_fields = fields


class CheckpointSerializer(PayloadColumns, serializers.ModelSerializer[Checkpoint]):
    wait_reason = serializers.SerializerMethodField(
        help_text="Why a step of a limited queue still waits for its admission (null otherwise)."
    )

    @extend_schema_field(OpenApiTypes.STR)
    def get_wait_reason(self, cp: Checkpoint) -> str | None:
        if cp.admission != Admission.WAITING or cp.status != CheckpointStatus.PENDING:
            return None
        return step_wait_reason(cp.queue, cp.queue_key)

    class Meta:
        model = Checkpoint
        fields = (
            "seq",
            "name",
            "kind",
            "status",
            "input",
            "output",
            "error",
            "attempts",
            "wake_at",
            "retry_at",
            "timeout_at",
            "queue",
            "queue_key",
            "admission",
            "admitted_at",
            "wait_reason",
            "dispatches",
            "enqueued_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
            "progress",
            "events",
        )
        read_only_fields = fields


class MaskedNameMixin:
    """Shows a callback's token (a credential) as ``__callback__:…`` in ``name``."""

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)  # type: ignore[misc]
        data["name"] = masked(data["name"])
        return data


class WaiterSerializer(MaskedNameMixin, serializers.ModelSerializer[SignalWaiter]):
    class Meta:
        model = SignalWaiter
        fields = ("name", "seq", "created_at")
        read_only_fields = fields


class BufferedSignalSerializer(MaskedNameMixin, PayloadColumns, serializers.ModelSerializer[BufferedSignal]):
    class Meta:
        model = BufferedSignal
        fields = ("id", "name", "payload", "created_at")
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    """A run with its payloads, history, waiters and buffered signals, and the breakpoint it is paused at."""

    paused_at = serializers.SerializerMethodField(help_text="The label of the breakpoint the run is paused at.")

    checkpoints = CheckpointSerializer(many=True, read_only=True)
    waiters = WaiterSerializer(many=True, read_only=True)
    buffered_signals = BufferedSignalSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields: tuple[str, ...] = (
            *RunSerializer.Meta.fields,
            "input",
            "output",
            "error",
            "search_attributes",
            "deadline_at",
            "checkpoints",
            "waiters",
            "buffered_signals",
            "paused_at",
        )
        read_only_fields = fields

    def get_paused_at(self, run: Run) -> str | None:
        # From the prefetched checkpoints: no query of its own.
        pending = [
            cp
            for cp in run.checkpoints.all()
            if cp.kind == CheckpointKind.BREAKPOINT and cp.status == CheckpointStatus.PENDING
        ]
        return max(pending, key=lambda cp: cp.seq).name if pending and run.status in ACTIVE else None


class OutcomeSerializer(serializers.Serializer[Any]):
    """What an action did to one run."""

    run_id = serializers.CharField()
    ok = serializers.BooleanField()
    message = serializers.CharField()
    result = AnyJSONField()
    code = serializers.CharField(allow_null=True)


class BulkResultSerializer(serializers.Serializer[Any]):
    action = serializers.CharField()
    matched = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    results = OutcomeSerializer(many=True)


class CallbackResultSerializer(serializers.Serializer[Any]):
    """What ``POST callbacks/{token}/`` wrote."""

    ok = serializers.BooleanField()
    outcome = serializers.ChoiceField(choices=["completed", "failed"])


class ErrorSerializer(serializers.Serializer[Any]):
    """Every error answer: a readable ``detail`` and a stable ``code``."""

    detail = serializers.CharField()
    code = serializers.CharField()


class ValidationErrorSerializer(ErrorSerializer):
    """A 400: ``errors`` maps each invalid field to its messages (when the problem is per field)."""

    # A declared field: DRF's metaclass takes it off the class, so it never hides ``Serializer.errors``.
    errors = serializers.DictField(child=AnyJSONField(), required=False)  # type: ignore[assignment]


class WorkflowSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    versions = serializers.ListField(child=serializers.IntegerField())
    latest = serializers.IntegerField()
    tags = serializers.ListField(child=serializers.CharField())
    timeout = serializers.FloatField(allow_null=True)
    takes_input = serializers.BooleanField()


class EventSerializer(serializers.Serializer[Any]):
    run_id = serializers.CharField()
    key = serializers.CharField()
    value = AnyJSONField()


# -- requests --------------------------------------------------------------------------


class StartSerializer(serializers.Serializer[Any]):
    """``POST runs/``."""

    workflow = StrictRegexField(NAME, max_length=200)
    input = AnyJSONField()
    run_id = StrictRegexField(RUN_ID, max_length=255, required=False)
    namespace = StrictRegexField(r"^[^\s\x00-\x1f\x7f]{1,100}$", max_length=100, required=False)
    tags = serializers.ListField(
        child=StrictCharField(max_length=100, allow_blank=False), max_length=100, required=False
    )
    search_attributes = serializers.DictField(child=AnyJSONField(), required=False)
    priority = StrictIntegerField(min_value=-(2**31), max_value=2**31 - 1, required=False)


class SignalSerializer(serializers.Serializer[Any]):
    """``POST runs/{id}/signal/``."""

    name = StrictRegexField(NAME, max_length=200)
    payload = AnyJSONField()


class CancelSerializer(serializers.Serializer[Any]):
    """``POST runs/{id}/cancel/``: ``compensate`` undoes completed steps (saga); ``reason`` goes to the audit log."""

    compensate = serializers.BooleanField(default=False)
    reason = StrictCharField(max_length=1000, required=False, allow_blank=True)


class RetrySerializer(serializers.Serializer[Any]):
    """``POST runs/{id}/retry-with-input/``: the corrected input of the new run."""

    input = AnyJSONField()


class ForkSerializer(serializers.Serializer[Any]):
    """``POST runs/{id}/fork/``: the position to rerun from, and optionally a new input."""

    from_seq = StrictIntegerField(min_value=1, max_value=2**31 - 1)
    input = AnyJSONField(help_text="The new run's input; absent or null keeps the original's.")
    reason = StrictCharField(max_length=1000, required=False, allow_blank=True)


class UpdateSerializer(serializers.Serializer[Any]):
    """``POST runs/{id}/update/{name}/``: the update's argument."""

    arg = AnyJSONField()


class EmptySerializer(serializers.Serializer[Any]):
    """No body needed."""


BULK_ACTIONS = ("requeue", "redispatch", "cancel", "retry", "signal", "republish")


class BulkSerializer(serializers.Serializer[Any]):
    """``POST runs/bulk/{action}/``: apply an action to the runs matching ``filter``.

    ``filter`` takes the query parameters of ``GET runs/`` plus ``ids`` (a list of
    run ids) and must not be empty. At most ``limit`` runs are touched, newest first.
    ``params`` are the action's own fields (``{"name", "payload"}`` for signal,
    ``{"compensate"}`` for cancel, ``{"input"}`` for retry). ``reason`` is kept in
    the audit log.
    """

    filter = serializers.DictField(child=AnyJSONField())
    limit = StrictIntegerField(min_value=1, default=100)
    params = serializers.DictField(child=AnyJSONField(), required=False, default=dict)
    reason = StrictCharField(max_length=1000, required=False, allow_blank=True, default="")

    def validate_limit(self, value: int) -> int:
        bound = int(conf.get("BULK_LIMIT"))
        if value > bound:
            raise serializers.ValidationError(f"at most {bound} runs per bulk action")
        return value

    def validate_filter(self, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise serializers.ValidationError("give at least one filter (status, workflow, ids...)")
        ids = value.get("ids")
        if ids is not None:
            if not isinstance(ids, list) or not all(isinstance(i, str) and 0 < len(i) <= 255 for i in ids):
                raise serializers.ValidationError({"ids": "a list of run ids"})
            if len(ids) > int(conf.get("BULK_LIMIT")):
                raise serializers.ValidationError({"ids": f"at most {conf.get('BULK_LIMIT')} ids"})
        query = {k: v for k, v in value.items() if k != "ids"}
        unknown = sorted(set(query) - set(RunFilter.base_filters))
        if unknown:
            raise serializers.ValidationError(f"unknown filter {unknown[0]!r}")
        for key, item in query.items():
            if not isinstance(item, (str, int)) or isinstance(item, bool):
                raise serializers.ValidationError({key: "a string or number"})
        return value
