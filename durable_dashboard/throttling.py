"""API throttling whose rate is read at request time from ``DURABLE_DASHBOARD["THROTTLE_RATE"]``."""

from __future__ import annotations

from rest_framework.throttling import UserRateThrottle

from durable_dashboard import conf


class DurableUserThrottle(UserRateThrottle):
    """Requests per authenticated user (or per IP address for anonymous ones)."""

    scope = "durable"

    def get_rate(self) -> str | None:
        rate = conf.get("THROTTLE_RATE")
        return str(rate) if rate else None
