"""The OpenAPI schema and its interactive docs, configured here rather than by the project's settings.

The schema is generated with the API's own title and enum names
(``custom_settings``), whatever ``SPECTACULAR_SETTINGS`` says; the Swagger UI
loads its assets from ``drf-spectacular-sidecar`` when it is installed, so the
page needs nothing from the internet.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from durable_dashboard.api_base import DashboardPolicy, documented

SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "django-durable API",
    "DESCRIPTION": "Start, inspect and steer durable workflow runs.",
    "VERSION": "1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "durable.models.RunStatus",
        "CheckpointStatusEnum": "durable.models.CheckpointStatus",
    },
}


class SchemaView(DashboardPolicy, SpectacularAPIView):
    """``GET schema/``: the OpenAPI document of the API (signed-in users)."""

    permission_classes = [IsAuthenticated]
    custom_settings = SCHEMA_SETTINGS

    @documented(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)  # type: ignore[no-any-return,no-untyped-call]


class SwaggerView(DashboardPolicy, SpectacularSwaggerView):
    """``GET docs/``: Swagger UI over :class:`SchemaView`."""

    permission_classes = [IsAuthenticated]
    title = SCHEMA_SETTINGS["TITLE"]

    @documented(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)  # type: ignore[no-any-return,no-untyped-call]

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        if apps.is_installed("drf_spectacular_sidecar"):
            return _sidecar(f"swagger-ui-dist/{filename}")
        return str(SpectacularSwaggerView._swagger_ui_resource(filename))  # type: ignore[no-untyped-call]

    @staticmethod
    def _swagger_ui_favicon() -> str:
        if apps.is_installed("drf_spectacular_sidecar"):
            return _sidecar("swagger-ui-dist/favicon-32x32.png")
        return str(SpectacularSwaggerView._swagger_ui_favicon())  # type: ignore[no-untyped-call]


def _sidecar(path: str) -> str:
    from django.templatetags.static import static

    return static(f"drf_spectacular_sidecar/{path}")
