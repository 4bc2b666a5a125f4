"""``manage.py durable_health``: the health check for container probes (exit status 1 when unhealthy)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from durable.observability.health import check


class Command(BaseCommand):
    help = (
        "Check the database, the broker (with Celery), live workers per queue, waiting steps, "
        "late timers and stale runs. Prints the JSON body; exits 1 when unhealthy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing; only the exit status")

    def handle(self, *args: Any, quiet: bool, **options: Any) -> None:
        health = check()
        if not quiet:
            self.stdout.write(json.dumps(health.body, indent=2, sort_keys=True, default=str))
        if not health.healthy:
            # SystemExit, not CommandError: the body already says why, and probes read the status.
            raise SystemExit(1)
