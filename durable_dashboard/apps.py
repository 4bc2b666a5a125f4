from django.apps import AppConfig


class DurableDashboardConfig(AppConfig):
    name = "durable_dashboard"
    verbose_name = "Durable dashboard"
    default_auto_field = "django.db.models.BigAutoField"
