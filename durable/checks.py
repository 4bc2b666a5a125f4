"""System checks of django-durable (``manage.py check``), each with a stable id.

``durable.E001``: ``settings.DURABLE`` does not parse (an unknown option, a bad value).
"""

from __future__ import annotations

from django.core import checks


def check_settings(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """``durable.E001``, once per problem, when ``settings.DURABLE`` does not parse (all of them at once)."""
    from django.conf import settings

    from durable import conf

    _, found = conf.problems(getattr(settings, "DURABLE", None))
    return [
        checks.Error(problem, hint="See the settings reference (docs/settings.md).", id="durable.E001")
        for problem in found
    ]
