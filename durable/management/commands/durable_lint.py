"""``manage.py durable_lint``: calls in workflow functions that would break replay (see durable.lint)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from durable.exceptions import DurableError
from durable.lint import lint_workflows
from durable.management import cli
from durable.runtime import registry


class Command(cli.OperatorCommand):
    help = (
        "Read the source of every registered workflow (or the ones named) and report calls that break "
        "replay (time, random, uuid, ORM and network calls outside steps, iteration over sets), each "
        "with its file, line and the ctx alternative. Exit status 1 when it finds any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("workflows", nargs="*", metavar="WORKFLOW", help="workflow names (default: all)")
        parser.add_argument("--json", action="store_true", help="the findings as a JSON list")

    def handle(self, *args: Any, workflows: list[str], **options: Any) -> None:
        try:
            defs = [registry.get_workflow(name) for name in workflows] if workflows else None
        except DurableError as exc:
            raise cli.bad(str(exc)) from None
        findings = lint_workflows(defs)
        if options["json"]:
            self.stdout.write(json.dumps([f.as_dict() for f in findings], indent=2))
        else:
            for finding in findings:
                self.stdout.write(str(finding))
            checked = len(defs) if defs is not None else len({wf.fn for wf in registry.workflows()})
            self.stdout.write(f"{len(findings)} finding(s) in {checked} workflow function(s)")
        if findings:
            raise cli.failed(f"{len(findings)} call(s) in workflow code would break replay")
