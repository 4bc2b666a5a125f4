"""``GET health/`` and ``GET metrics``: what probes and scrapers read.

Authentication (decided here, documented in the Observability page):

* ``health/`` answers anyone by default: a container or load-balancer probe
  cannot log in, and the body holds counts and ages only (no run ids, no
  payloads). With ``DURABLE_DASHBOARD["HEALTH_TOKEN"]`` set it needs
  ``Authorization: Bearer <token>`` or a user holding ``durable.view_run``.
* ``metrics`` always needs ``Authorization: Bearer <METRICS_TOKEN>`` or a
  user holding ``durable.view_run``: anonymous scrapes are refused.

Tokens are compared in constant time. Both answer JSON errors like every
other endpoint of the API (:mod:`durable_dashboard.api_base`).
"""

from __future__ import annotations

import hmac
from typing import Any

from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from durable.observability.health import check
from durable_dashboard import conf
from durable_dashboard.api_base import JSONEndpoint, documented
from durable_dashboard.permissions import VIEW_PERMISSION


def bearer_matches(request: Any, token: str | None) -> bool:
    """Whether the request carries ``Authorization: Bearer <token>`` (False when no token is configured)."""
    if not token:
        return False
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), str(token).encode())


def _viewer(request: Any) -> bool:
    user = request.user
    return bool(user and user.is_authenticated and user.is_active and user.has_perm(VIEW_PERMISSION))


class HealthAccess(BasePermission):
    """Anyone, unless ``HEALTH_TOKEN`` is set: then its bearer token or a viewer of runs."""

    message = "The health check needs the HEALTH_TOKEN bearer token or durable.view_run."

    def has_permission(self, request: Any, view: Any) -> bool:
        token = conf.get("HEALTH_TOKEN")
        return not token or bearer_matches(request, token) or _viewer(request)


class MetricsAccess(BasePermission):
    """The ``METRICS_TOKEN`` bearer token, or a viewer of runs; never anonymous."""

    message = "Metrics need the METRICS_TOKEN bearer token or durable.view_run."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bearer_matches(request, conf.get("METRICS_TOKEN")) or _viewer(request)


class HealthView(JSONEndpoint, APIView):
    """``GET health/``: 200 when healthy, 503 when not, with the same JSON body either way."""

    permission_classes = [HealthAccess]
    # Probes call every few seconds from one address: never throttled into a false alarm.
    throttle_classes: list[Any] = []

    @documented(
        summary="Health check",
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="healthy"),
            503: OpenApiResponse(OpenApiTypes.OBJECT, description="unhealthy; `problems` says why"),
        },
    )
    def get(self, request: Request) -> Response:
        health = check()
        return Response(health.body, status=200 if health.healthy else 503)


class MetricsView(JSONEndpoint, APIView):
    """``GET metrics``: the Prometheus text exposition (:mod:`durable.observability.prometheus`)."""

    permission_classes = [MetricsAccess]
    throttle_classes: list[Any] = []

    @documented(
        summary="Prometheus metrics",
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="Prometheus text exposition format"),
            501: OpenApiResponse(OpenApiTypes.OBJECT, description="prometheus-client is not installed"),
        },
    )
    def get(self, request: Request) -> HttpResponseBase:
        try:
            from durable.observability import prometheus
        except ImportError:
            detail = "install prometheus-client (the 'prometheus' extra) to serve metrics"
            return Response({"detail": detail, "code": "not_installed"}, status=501)
        return HttpResponse(prometheus.exposition(), content_type=prometheus.CONTENT_TYPE)
