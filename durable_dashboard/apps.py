"""The dashboard app: the admin pages and the REST API of django-durable."""

from django.apps import AppConfig
from django.core import checks


class DurableDashboardConfig(AppConfig):
    name = "durable_dashboard"
    verbose_name = "Durable dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from durable_dashboard.checks import check_dashboard

        checks.register(check_dashboard, "durable_dashboard")
