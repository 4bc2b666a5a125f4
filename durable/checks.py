"""System checks of django-durable (``manage.py check``), each with a stable id.

``durable.E001``: ``settings.DURABLE`` does not parse (an unknown option, a bad value).
"""

from __future__ import annotations

from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def check_settings(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """``durable.E001`` when ``settings.DURABLE`` does not parse."""
    from durable import conf

    try:
        conf.get()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="durable.E001")]
    return []
