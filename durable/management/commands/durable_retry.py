"""``manage.py durable_retry ID --input JSON``: a new run of a failed run's workflow with corrected input."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from durable.management import cli


class Command(cli.OperatorCommand):
    help = "Retry a failed or dead run with corrected input: a new run <ID>~retry~<hex> (printed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", metavar="RUN_ID")
        cli.add_input_flags(parser, required=True)
        parser.add_argument("--reason", default="", help="why (kept in the audit log)")

    def handle(self, *args: Any, run_id: str, **options: Any) -> None:
        value = cli.read_input(options, options.get("stdin") or sys.stdin)
        (outcome,) = cli.act("retry", [run_id], {"input": value}, reason=options["reason"])
        if not outcome.ok:
            raise cli.refuse(outcome)
        self.stdout.write(outcome.result["new_run_id"])
