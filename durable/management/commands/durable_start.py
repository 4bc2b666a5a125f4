"""``manage.py durable_start WORKFLOW``: start a run (audited), optionally waiting for its end."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

import durable
from durable.engine.vocab import RunStatus
from durable.exceptions import WaitTimeout
from durable.management import cli
from durable.management.render import run_dict, to_json


class Command(cli.OperatorCommand):
    help = (
        "Start a run of WORKFLOW and print its id. Idempotent on --run-id. With --wait, block until it "
        "settles and print it as JSON (exit 1 unless it completed)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("workflow", metavar="WORKFLOW", help="a registered workflow name")
        cli.add_input_flags(parser, required=False)
        parser.add_argument("--run-id", help="the run id (an existing id starts nothing new)")
        parser.add_argument("--namespace", help="namespace (default: DURABLE['DEFAULT_NAMESPACE'])")
        parser.add_argument("--tag", action="append", default=[], help="a tag; repeat for more")
        parser.add_argument("--wait", action="store_true", help="wait until the run settles")
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds --wait waits (default 60)")

    def handle(self, *args: Any, workflow: str, **options: Any) -> None:
        params: dict[str, Any] = {
            "workflow": workflow,
            "input": cli.read_input(options, options.get("stdin") or sys.stdin),
        }
        for key in ("run_id", "namespace"):
            if options[key] is not None:
                params[key] = options[key]
        if options["tag"]:
            params["tags"] = options["tag"]
        if options["timeout"] < 0:
            raise cli.bad("--timeout must not be negative")
        outcome = cli.start(params)
        if not outcome.ok:
            raise cli.refuse(outcome)
        if not options["wait"]:
            self.stdout.write(outcome.run_id)
            return
        try:
            run = durable.wait_for_run(outcome.run_id, timeout=options["timeout"])
        except WaitTimeout as exc:
            raise cli.failed(f"{outcome.run_id}: {exc}") from None
        self.stdout.write(to_json(run_dict(run)))
        if run.status != RunStatus.COMPLETED:
            raise cli.failed(f"{run.id} ended {run.status}")
