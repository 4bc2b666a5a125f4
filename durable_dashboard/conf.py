"""``settings.DURABLE_DASHBOARD``: options of the admin and REST API, read at use time.

``REQUIRE_NAMESPACE_GRANT``  False. When true, a non-superuser with no
                             :class:`~durable_dashboard.models.NamespaceGrant`
                             sees no runs at all (instead of every namespace).
``BULK_LIMIT``               1000. Most runs one bulk action may touch.
``COUNT_LIMIT``              1000. The admin run list counts filtered rows up to
                             this bound (so pages past it are not offered), never
                             the whole table.
``SUMMARY_CACHE_SECONDS``    30. How long the summary page's aggregates are cached.
``THROTTLE_RATE``            "1000/minute". API requests per user (``None``: off).
``LIVE_INTERVAL``            5. Seconds between the refreshes of a run list or run
                             page while anything on it is active (0: never refresh).
``HEALTH_TOKEN``             None. When set, ``health/`` needs it as a bearer token
                             (or a user holding ``durable.view_run``).
``METRICS_TOKEN``            None. The bearer token a Prometheus scraper sends to
                             ``metrics`` (users holding ``durable.view_run`` may too).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    "REQUIRE_NAMESPACE_GRANT": False,
    "BULK_LIMIT": 1000,
    "COUNT_LIMIT": 1000,
    "SUMMARY_CACHE_SECONDS": 30,
    "THROTTLE_RATE": "1000/minute",
    "LIVE_INTERVAL": 5,
    "HEALTH_TOKEN": None,
    "METRICS_TOKEN": None,
}


def get(name: str) -> Any:
    """The current value of option ``name`` (settings override the defaults)."""
    options = getattr(settings, "DURABLE_DASHBOARD", None) or {}
    return options.get(name, DEFAULTS[name])
