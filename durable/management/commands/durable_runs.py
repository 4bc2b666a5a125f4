"""``manage.py durable_runs``: list runs by status, workflow, namespace, tag, staleness and age."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from durable.management import cli
from durable.management.render import run_dict, to_json


class Command(cli.OperatorCommand):
    help = "List runs, newest first: a table, or JSON with --json."

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_filter_flags(parser, limit=50)
        parser.add_argument("--json", action="store_true", help="print the runs as a JSON list")

    def handle(self, *args: Any, **options: Any) -> None:
        runs, more = cli.select(options)
        if options["json"]:
            self.stdout.write(to_json([run_dict(r) for r in runs]))
            return
        cli.show_runs(self, runs, more, "(showing the newest {count}; more match: raise --limit or narrow the filters)")
