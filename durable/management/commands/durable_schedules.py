"""``manage.py durable_schedules``: every schedule with its spec in words and next fire times."""

from __future__ import annotations

import json as json_module
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import durable


class Command(BaseCommand):
    help = "List schedules: key, workflow, spec in words, paused, next fire times and last run (--json: as JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the schedules as a JSON list")
        parser.add_argument("--next", type=int, default=5, help="how many next fire times to show (1 to 100)")
        parser.add_argument("--sync", action="store_true", help="sync the code's schedules to the database first")

    def handle(self, *args: Any, json: bool, next: int, sync: bool, **options: Any) -> None:
        if not 1 <= next <= 100:
            raise CommandError(f"--next must be from 1 to 100, got {next}")
        if sync:
            durable.sync_schedules()
        schedules = durable.list_schedules()
        if json:
            rows = [{**info.as_dict(), "upcoming": [w.isoformat() for w in info.upcoming(next)]} for info in schedules]
            self.stdout.write(_dumps(rows))
            return
        if not schedules:
            self.stdout.write("no schedules")
            return
        for info in schedules:
            state = "paused" if info.paused else "active"
            last = info.last_run_id or "-"
            self.stdout.write(
                f"{info.key}  {info.workflow}  {info.description}  [{state}, {info.origin}]  last run: {last}"
            )
            upcoming = info.upcoming(next) if not info.paused else []
            for window in upcoming:
                self.stdout.write(f"    {window.isoformat()}")
            if not info.paused and not upcoming:
                self.stdout.write("    (ended: no more windows)")


def _dumps(value: Any) -> str:
    return json_module.dumps(value, indent=2)
