"""``manage.py durable_fork ID --from-seq N [--input JSON]``: rerun a finished run from a position."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from durable.management import cli


class Command(cli.OperatorCommand):
    help = (
        "Rerun a finished run from position N: a new run <ID>~fork~<hex> (printed) keeps the history before N "
        "and executes from there; --input replaces the input (default: the original's)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", metavar="RUN_ID")
        parser.add_argument("--from-seq", type=int, required=True, metavar="N", help="the position to rerun from")
        cli.add_input_flags(parser, required=False)
        parser.add_argument("--reason", default="", help="why (kept in the audit log)")

    def handle(self, *args: Any, run_id: str, **options: Any) -> None:
        value = cli.read_input(options, options.get("stdin") or sys.stdin)
        params = {"from_seq": options["from_seq"], "input": value}
        (outcome,) = cli.act("fork", [run_id], params, reason=options["reason"])
        if not outcome.ok:
            raise cli.refuse(outcome)
        self.stdout.write(outcome.result["new_run_id"])
