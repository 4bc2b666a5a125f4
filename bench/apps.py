"""The bench app: installing it makes durable auto-discover ``bench/workflows.py``."""

from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "django-durable benchmarks"
    default_auto_field = "django.db.models.BigAutoField"
