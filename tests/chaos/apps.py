"""The chaos suite as an installed app: durable's autodiscovery imports its ``workflows`` in every process."""

from __future__ import annotations

from django.apps import AppConfig


class ChaosConfig(AppConfig):
    name = "tests.chaos"
    label = "durable_chaos"
    verbose_name = "django-durable chaos suite"
