"""``manage.py durable_republish``: deliver settled runs' lifecycle events again."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durable.exceptions import DurableError
from durable.messaging import republish


def _when(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"not an ISO date/time: {value!r}") from exc
    if parsed.tzinfo is None:
        raise CommandError(f"give a timezone (e.g. {value}+00:00)")
    return parsed


class Command(BaseCommand):
    help = (
        "Publish lifecycle events (run.completed/run.failed) of settled runs again: one run, or by "
        "workflow, ending and finish time; optionally to one subscriber. Failed deliveries are retried; "
        "subscribers already started are not started twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", dest="run_id", help="one run id")
        parser.add_argument("--workflow", help="source workflow name")
        parser.add_argument("--ending", choices=["completed", "failed"])
        parser.add_argument("--since", help="finished at or after (ISO 8601 with timezone)")
        parser.add_argument("--until", help="finished before (ISO 8601 with timezone)")
        parser.add_argument("--subscriber", help="only this subscriber workflow")
        parser.add_argument("--limit", type=int, default=100)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not any(opts[k] for k in ("run_id", "workflow", "since", "until")):
            raise CommandError("choose runs with --run, --workflow, --since or --until")
        try:
            report = republish(
                opts["run_id"],
                workflow=opts["workflow"],
                ending=opts["ending"],
                since=_when(opts["since"]) if opts["since"] else None,
                until=_when(opts["until"]) if opts["until"] else None,
                subscriber=opts["subscriber"],
                limit=opts["limit"],
            )
        except DurableError as exc:
            raise CommandError(str(exc)) from exc
        if opts["json"]:
            self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
            return
        if not report:
            self.stdout.write("no settled runs matched")
        for run_id, outcomes in report.items():
            line = ", ".join(f"{sub}: {outcome}" for sub, outcome in sorted(outcomes.items())) or "no subscribers"
            self.stdout.write(f"{run_id}  {line}")
