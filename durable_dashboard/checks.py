"""System checks for durable_dashboard: every prerequisite of the admin pages and the REST API.

Each missing piece is reported (all of them at once, each with a hint) by
``manage.py check`` and at start-up, instead of failing at request time:

* ``durable_dashboard.E001``: a package the dashboard needs is not installed;
* ``durable_dashboard.E002``: an app it needs is not in ``INSTALLED_APPS``;
* ``durable_dashboard.E003``: a middleware the admin needs is not in ``MIDDLEWARE``;
* ``durable_dashboard.E004``: no Django template engine that loads app templates;
* ``durable_dashboard.W001``: an unknown key in ``DURABLE_DASHBOARD``;
* ``durable_dashboard.W002``: ``drf-spectacular-sidecar`` missing, so the API docs page
  loads Swagger UI from the internet.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from django.core import checks

EXTRA_HINT = 'Install the dashboard\'s dependencies: pip install "django-durable[dashboard]".'
PACKAGES = {
    "rest_framework": "djangorestframework",
    "django_filters": "django-filter",
    "drf_spectacular": "drf-spectacular",
}
APPS = {
    "django.contrib.admin": "the admin pages",
    "django.contrib.auth": "users and permissions",
    "django.contrib.contenttypes": "permissions",
    "django.contrib.sessions": "the admin's login",
    "django.contrib.messages": "the admin's action messages",
    "django.contrib.staticfiles": "the admin's and the dashboard's CSS",
    "rest_framework": "the REST API",
    "django_filters": "the API's run filters",
    "drf_spectacular": "the API schema and its docs page",
}
MIDDLEWARE = {
    "django.contrib.sessions.middleware.SessionMiddleware": "sessions (the admin's login)",
    "django.contrib.auth.middleware.AuthenticationMiddleware": "request.user",
    "django.contrib.messages.middleware.MessageMiddleware": "the admin's action messages",
}


def check_dashboard(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every problem with the dashboard's prerequisites in the current settings, at once."""
    from django.conf import settings

    return dashboard_problems(
        installed=list(settings.INSTALLED_APPS),
        middleware=list(getattr(settings, "MIDDLEWARE", []) or []),
        templates=list(getattr(settings, "TEMPLATES", []) or []),
        options=getattr(settings, "DURABLE_DASHBOARD", None),
    )


def dashboard_problems(
    *, installed: list[str], middleware: list[str], templates: list[dict[str, Any]], options: Any
) -> list[checks.CheckMessage]:
    """The check on settings given as values (``INSTALLED_APPS``, ``MIDDLEWARE``, ``TEMPLATES``...)."""
    return [*_packages(), *_apps(installed), *_middleware(middleware), *_templates(templates), *_options(options)]


def _packages() -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f"durable_dashboard needs the package {dist!r} (module {module!r}), which is not installed.",
            hint=EXTRA_HINT,
            id="durable_dashboard.E001",
        )
        for module, dist in PACKAGES.items()
        if importlib.util.find_spec(module) is None
    ]


def _installed(name: str, installed: list[str]) -> bool:
    # An app may be listed by its AppConfig path ("django.contrib.admin.apps.SimpleAdminConfig").
    return any(entry == name or entry.startswith(name + ".apps.") for entry in installed)


def _apps(installed: list[str]) -> list[checks.CheckMessage]:
    found: list[checks.CheckMessage] = [
        checks.Error(
            f"durable_dashboard needs {app!r} in INSTALLED_APPS (for {why}).",
            hint=f"Add {app!r} to INSTALLED_APPS.",
            id="durable_dashboard.E002",
        )
        for app, why in APPS.items()
        if not _installed(app, installed) and importlib.util.find_spec(app.split(".")[0]) is not None
    ]
    if not _installed("drf_spectacular_sidecar", installed):
        found.append(
            checks.Warning(
                "drf_spectacular_sidecar is not in INSTALLED_APPS: the API docs page loads Swagger UI "
                "from the internet.",
                hint='pip install "django-durable[dashboard]" and add "drf_spectacular_sidecar" to INSTALLED_APPS.',
                id="durable_dashboard.W002",
            )
        )
    return found


def _middleware(middleware: list[str]) -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f"durable_dashboard needs {path!r} in MIDDLEWARE (for {why}).",
            hint=f"Add {path!r} to MIDDLEWARE, in the order Django's docs give.",
            id="durable_dashboard.E003",
        )
        for path, why in MIDDLEWARE.items()
        if path not in middleware
    ]


def _templates(templates: list[dict[str, Any]]) -> list[checks.CheckMessage]:
    for engine in templates:
        if engine.get("BACKEND") != "django.template.backends.django.DjangoTemplates":
            continue
        loaders = (engine.get("OPTIONS") or {}).get("loaders")
        if engine.get("APP_DIRS") or (loaders and "django.template.loaders.app_directories.Loader" in str(loaders)):
            return []
    return [
        checks.Error(
            "durable_dashboard needs a DjangoTemplates engine that loads templates from installed apps.",
            hint="In TEMPLATES, use the DjangoTemplates backend with 'APP_DIRS': True.",
            id="durable_dashboard.E004",
        )
    ]


def _options(options: Any) -> list[checks.CheckMessage]:
    from durable_dashboard.conf import DEFAULTS

    if options is None:
        return []
    if not isinstance(options, dict):
        return [
            checks.Error("DURABLE_DASHBOARD must be a dict.", hint="See docs/settings.md.", id="durable_dashboard.E005")
        ]
    return [
        checks.Warning(
            f"DURABLE_DASHBOARD has an unknown key {key!r}; it is ignored.",
            hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
            id="durable_dashboard.W001",
        )
        for key in options
        if key not in DEFAULTS
    ]
