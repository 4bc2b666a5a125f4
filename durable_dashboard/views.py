"""REST API views: thin wrappers over :mod:`durable_dashboard.operations`.

Reads use the ORM (limited to the caller's namespaces); every write goes
through a durable service function. A run outside the caller's namespaces is
a 404, exactly like a run that does not exist.
"""

from __future__ import annotations

import builtins
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.http import Http404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from durable import conf as durable_conf
from durable.models import Checkpoint, Run
from durable.runtime import registry
from durable_dashboard import operations
from durable_dashboard import serializers as s
from durable_dashboard.api_base import JSONEndpoint, documented
from durable_dashboard.errors import STATUS_BY_CODE
from durable_dashboard.errors import exception_handler as exception_handler  # the path settings name
from durable_dashboard.filters import RunFilter, storable
from durable_dashboard.permissions import CanPerformAction, CanViewRuns, namespace_allowed, visible_runs


def _error(code: int, description: str) -> OpenApiResponse:
    return OpenApiResponse(s.ValidationErrorSerializer if code == 400 else s.ErrorSerializer, description=description)


COMMON_ERRORS = {
    400: _error(400, "Invalid request (malformed JSON, wrong types, refused by the engine)."),
    401: _error(401, "Not authenticated."),
    403: _error(403, "Missing permission."),
    404: _error(404, "No such run (or not in your namespaces)."),
    413: _error(413, "Request body too large."),
    429: _error(429, "Throttled."),
}
ACTION_ERRORS = {
    **COMMON_ERRORS,
    409: _error(409, "The run's status does not allow this action."),
}


class RunPagination(CursorPagination):
    """Newest first, by cursor: no COUNT, stable under inserts."""

    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def decode_cursor(self, request: Request) -> Any:
        """A cursor that is not one of ours is a bad request (400), not a missing page."""
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise ValidationError({"cursor": "Invalid cursor."}) from None


def _outcome_response(outcome: operations.Outcome) -> Response:
    if outcome.ok:
        return Response(s.OutcomeSerializer(outcome.as_dict()).data)
    code = outcome.code or "error"
    return Response({"detail": outcome.message, "code": code}, status=STATUS_BY_CODE.get(code, 400))


LIST_FIELDS = s.RunSerializer.Meta.fields


@extend_schema_view(
    list=documented(summary="List runs", responses={200: s.RunSerializer(many=True), **COMMON_ERRORS}),
    retrieve=documented(summary="A run with its checkpoints", responses={200: s.RunDetailSerializer, **COMMON_ERRORS}),
)
class RunViewSet(JSONEndpoint, viewsets.GenericViewSet[Run]):
    """Runs: list, detail, start, and the operator actions."""

    lookup_value_regex = "[^/]+"
    serializer_class = s.RunSerializer
    filterset_class = RunFilter
    filter_backends = [DjangoFilterBackend]
    pagination_class = RunPagination
    permission_classes = [CanViewRuns, CanPerformAction]
    queryset = Run.objects.all()

    # -- helpers -----------------------------------------------------------------------
    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # No stored id or name holds a NUL or control character (PostgreSQL refuses NUL in text).
        if any(isinstance(v, str) and not storable(v) for v in kwargs.values()):
            raise Http404("No run with that id.")

    def durable_action(self, request: Request) -> str | None:
        """The operator action this request performs (its permission is checked), if any."""
        name = self.action
        if name == "create":
            return "start"
        if name in ("signal", "requeue", "redispatch", "republish", "fork"):
            return name
        if name == "continue_run":
            return "continue"
        if name == "send_update":
            return "update"
        if name == "retry_with_input":
            return "retry"
        if name == "cancel":
            return "cancel_compensate" if self._compensate(request.data) else "cancel"
        if name == "bulk":
            bulk = self.kwargs.get("bulk_action", "")
            params = request.data.get("params") if isinstance(request.data, dict) else None
            if bulk == "cancel" and self._compensate(params):
                return "cancel_compensate"
            return bulk if bulk in s.BULK_ACTIONS else None
        return None

    @staticmethod
    def _compensate(data: Any) -> bool:
        if not isinstance(data, dict):
            return False
        serializer = s.CancelSerializer(data=data)
        return bool(serializer.is_valid() and serializer.validated_data["compensate"])

    def get_queryset(self) -> QuerySet[Run]:
        qs = visible_runs(self.request.user).order_by("-created_at", "-id")
        if self.action == "list":
            qs = qs.only(*LIST_FIELDS)
        elif self.action == "retrieve":
            qs = qs.prefetch_related(
                Prefetch("checkpoints", queryset=Checkpoint.objects.order_by("seq")), "waiters", "buffered_signals"
            )
        return qs

    def get_serializer_class(self) -> type[Any]:
        return s.RunDetailSerializer if self.action == "retrieve" else s.RunSerializer

    def _run_id(self) -> str:
        """The URL's run id, once the run is known to exist and be visible (else 404)."""
        run_id: str = self.kwargs["pk"]
        if not visible_runs(self.request.user).filter(id=run_id).exists():
            raise Http404("No run with that id.")
        return run_id

    def _act(self, request: Request, action: str, params: dict[str, Any], reason: str = "") -> Response:
        run_id = self._run_id()
        (outcome,) = operations.perform(action, [run_id], params, user=request.user, via="api", reason=reason)
        return _outcome_response(outcome)

    @staticmethod
    def _valid(serializer_class: type[Any], data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ValidationError({"detail": "the request body must be a JSON object"})
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    # -- endpoints ---------------------------------------------------------------------
    def list(self, request: Request) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(s.RunSerializer(page, many=True, context={"request": request}).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(s.RunDetailSerializer(self.get_object(), context={"request": request}).data)

    @documented(
        summary="Start a run (idempotent on run_id)",
        request=s.StartSerializer,
        responses={
            201: OpenApiResponse(s.RunDetailSerializer, description="Created."),
            200: OpenApiResponse(s.RunDetailSerializer, description="A run with this id already existed."),
            **ACTION_ERRORS,
            429: _error(429, "A singleton workflow's key has its queue full (code queue_full); nothing was started."),
        },
    )
    def create(self, request: Request) -> Response:
        data = self._valid(s.StartSerializer, request.data)
        namespace = data.get("namespace")
        if namespace is None:
            namespace = durable_conf.get().default_namespace
        if not namespace_allowed(request.user, namespace):
            raise PermissionDenied(f"You may not start runs in namespace {namespace!r}.")
        existed = False
        if "run_id" in data:
            existing = Run.objects.filter(id=data["run_id"]).only("namespace").first()
            if existing is not None:
                if not namespace_allowed(request.user, existing.namespace):
                    return Response(
                        {"detail": "This run id is already in use.", "code": "run_id_taken"},
                        status=status.HTTP_409_CONFLICT,
                    )
                existed = True
        outcome = operations.start(data, user=request.user, via="api")
        if not outcome.ok:
            return _outcome_response(outcome)
        run = self.get_queryset().prefetch_related("checkpoints", "waiters", "buffered_signals").get(id=outcome.run_id)
        return Response(
            s.RunDetailSerializer(run, context={"request": request}).data,
            status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED,
        )

    @documented(
        summary="Send a signal", request=s.SignalSerializer, responses={200: s.OutcomeSerializer, **ACTION_ERRORS}
    )
    @action(detail=True, methods=["post"])
    def signal(self, request: Request, pk: str) -> Response:
        return self._act(request, "signal", self._valid(s.SignalSerializer, request.data))

    @documented(
        summary="Cancel a run (optionally compensating completed steps)",
        request=s.CancelSerializer,
        responses={200: s.OutcomeSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        data = self._valid(s.CancelSerializer, request.data)
        action = "cancel_compensate" if data["compensate"] else "cancel"
        return self._act(request, action, {}, reason=data.get("reason", ""))

    @documented(
        summary="Requeue a failed or dead run", request=None, responses={200: s.OutcomeSerializer, **ACTION_ERRORS}
    )
    @action(detail=True, methods=["post"])
    def requeue(self, request: Request, pk: str) -> Response:
        return self._act(request, "requeue", {})

    @documented(
        summary="Dispatch the run's pending steps again",
        request=None,
        responses={200: s.OutcomeSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def redispatch(self, request: Request, pk: str) -> Response:
        return self._act(request, "redispatch", {})

    @documented(
        summary="Retry a failed run as a new run with corrected input",
        request=s.RetrySerializer,
        responses={200: s.OutcomeSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["post"], url_path="retry-with-input")
    def retry_with_input(self, request: Request, pk: str) -> Response:
        return self._act(request, "retry", self._valid(s.RetrySerializer, request.data))

    @documented(
        summary="Rerun a finished run from a position (fork): a new run keeps the history before it",
        request=s.ForkSerializer,
        responses={200: s.OutcomeSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk: str) -> Response:
        params = self._valid(s.ForkSerializer, request.data)
        reason = params.pop("reason", "")
        return self._act(request, "fork", params, reason=reason)

    @documented(
        summary="Continue a run paused at a breakpoint (404 when it is not paused at one)",
        request=None,
        responses={200: s.OutcomeSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["post"], url_path="continue", url_name="continue")
    def continue_run(self, request: Request, pk: str) -> Response:
        return self._act(request, "continue", {})

    @documented(
        summary="Send a validated update to a run",
        request=s.UpdateSerializer,
        parameters=[OpenApiParameter("update_name", OpenApiTypes.STR, OpenApiParameter.PATH)],
        responses={200: s.OutcomeSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["post"], url_path=r"update/(?P<update_name>[^/]+)", url_name="update")
    def send_update(self, request: Request, pk: str, update_name: str) -> Response:
        params = self._valid(s.UpdateSerializer, request.data)
        name = s.SignalSerializer(data={"name": update_name})
        name.is_valid(raise_exception=True)
        return self._act(request, "update", {"name": update_name, **params})

    @documented(
        summary="Republish the run's lifecycle events",
        request=None,
        responses={200: s.OutcomeSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def republish(self, request: Request, pk: str) -> Response:
        return self._act(request, "republish", {})

    @documented(
        summary="Read a query value the run published (ctx.set_event)",
        parameters=[OpenApiParameter("key", OpenApiTypes.STR, OpenApiParameter.PATH)],
        responses={200: s.EventSerializer, **ACTION_ERRORS},
    )
    @action(detail=True, methods=["get"], url_path=r"events/(?P<key>[^/]+)")
    def events(self, request: Request, pk: str, key: str) -> Response:
        run_id = self._run_id()
        value = operations.get_event(run_id, key)
        return Response({"run_id": run_id, "key": key, "value": value})

    @documented(
        summary="Apply an action to the runs matching a filter (bounded)",
        request=s.BulkSerializer,
        parameters=[OpenApiParameter("bulk_action", OpenApiTypes.STR, OpenApiParameter.PATH, enum=s.BULK_ACTIONS)],
        responses={200: s.BulkResultSerializer, **ACTION_ERRORS},
    )
    @action(detail=False, methods=["post"], url_path=r"bulk/(?P<bulk_action>[^/]+)")
    def bulk(self, request: Request, bulk_action: str) -> Response:
        if bulk_action not in s.BULK_ACTIONS:
            raise Http404(f"Unknown bulk action; expected one of {', '.join(s.BULK_ACTIONS)}.")
        body = self._valid(s.BulkSerializer, request.data)
        params = self._bulk_params(bulk_action, body["params"])
        params.pop("reason", None)
        action_name = "cancel_compensate" if bulk_action == "cancel" and params.pop("compensate") else bulk_action
        run_ids = self._bulk_ids(body["filter"], body["limit"])
        outcomes = []
        if run_ids:
            reason = body["reason"]
            outcomes = operations.perform(action_name, run_ids, params, user=request.user, via="api", reason=reason)
        ok = sum(1 for o in outcomes if o.ok)
        return Response(
            {
                "action": action_name,
                "matched": len(run_ids),
                "succeeded": ok,
                "failed": len(outcomes) - ok,
                "results": [o.as_dict() for o in outcomes],
            }
        )

    def _bulk_params(self, bulk_action: str, params: dict[str, Any]) -> dict[str, Any]:
        serializer = {
            "signal": s.SignalSerializer,
            "retry": s.RetrySerializer,
            "cancel": s.CancelSerializer,
        }.get(bulk_action, s.EmptySerializer)
        try:
            return self._valid(serializer, params)
        except ValidationError as exc:
            raise ValidationError({"params": exc.detail}) from None

    def _bulk_ids(self, criteria: dict[str, Any], limit: int) -> builtins.list[str]:  # (``list`` is an action here)
        query = {k: str(v) for k, v in criteria.items() if k != "ids"}
        filterset = RunFilter(data=query, queryset=visible_runs(self.request.user))
        if not filterset.is_valid():
            raise ValidationError({"filter": filterset.errors})
        qs = filterset.qs
        if "ids" in criteria:
            qs = qs.filter(id__in=criteria["ids"])
        return list(qs.order_by("-created_at", "-id").values_list("id", flat=True)[:limit])


class WorkflowListView(JSONEndpoint, APIView):
    """``GET workflows/``: the workflows registered in this process, with their versions."""

    permission_classes = [CanViewRuns]

    @documented(summary="Registered workflows", responses={200: s.WorkflowSerializer(many=True), **COMMON_ERRORS})
    def get(self, request: Request) -> Response:
        by_name: dict[str, list[Any]] = {}
        for wf in registry.workflows():
            by_name.setdefault(wf.name, []).append(wf)
        rows = []
        for name in sorted(by_name):
            defs = sorted(by_name[name], key=lambda wf: wf.version)
            latest = defs[-1]
            rows.append(
                {
                    "name": name,
                    "versions": [wf.version for wf in defs],
                    "latest": latest.version,
                    "tags": list(latest.tags),
                    "timeout": latest.timeout,
                    "takes_input": latest.takes_input,
                }
            )
        return Response(s.WorkflowSerializer(rows, many=True).data)
