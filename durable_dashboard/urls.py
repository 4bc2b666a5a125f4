"""URLs of the REST API. Mount with ``path("api/durable/", include("durable_dashboard.urls"))``.

Run ids may contain any character but ``/`` and whitespace in these URLs.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path
from rest_framework.routers import SimpleRouter

from durable_dashboard.callbacks import CallbackView
from durable_dashboard.entity_api import EntityDetailView
from durable_dashboard.probes import HealthView, MetricsView
from durable_dashboard.queue_api import QueueViewSet
from durable_dashboard.schedule_api import ScheduleViewSet
from durable_dashboard.schema_views import SchemaView, SwaggerView
from durable_dashboard.views import RunViewSet, WorkflowListView

app_name = "durable_api"

router = SimpleRouter()
router.register("runs", RunViewSet, basename="run")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("queues", QueueViewSet, basename="queue")


def not_found(request: HttpRequest, *args: object, **kwargs: object) -> JsonResponse:
    """Unknown API paths answer JSON too, like every other API error."""
    return JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)


urlpatterns = [
    path("workflows/", WorkflowListView.as_view(), name="workflows"),
    path("health/", HealthView.as_view(), name="health"),
    re_path(r"^entities/(?P<name>[^/]+)/(?P<key>[^/]+)/$", EntityDetailView.as_view(), name="entity"),
    re_path(r"^metrics/?$", MetricsView.as_view(), name="metrics"),
    path("callbacks/<str:token>/", CallbackView.as_view(), name="callback"),
    path("callbacks/<str:token>/fail/", CallbackView.as_view(fail=True), name="callback-fail"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", SwaggerView.as_view(url_name="durable_api:schema"), name="docs"),
    path("", include(router.urls)),
    re_path(r"^.*/$", not_found),
]
