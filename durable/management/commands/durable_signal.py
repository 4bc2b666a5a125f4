"""``manage.py durable_signal ID NAME``: send a signal to a run (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from durable.management import cli


class Command(cli.OperatorCommand):
    help = "Send signal NAME (with an optional JSON --payload) to a run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", metavar="RUN_ID")
        parser.add_argument("name", metavar="NAME", help="the signal's name")
        parser.add_argument("--payload", help="the payload as JSON")
        parser.add_argument("--reason", default="", help="why (kept in the audit log)")

    def handle(self, *args: Any, run_id: str, name: str, **options: Any) -> None:
        payload = cli.parse_json(options["payload"], "--payload") if options["payload"] is not None else None
        (outcome,) = cli.act("signal", [run_id], {"name": name, "payload": payload}, reason=options["reason"])
        if not outcome.ok:
            raise cli.refuse(outcome)
        self.stdout.write(f"{run_id}: {outcome.message}")
