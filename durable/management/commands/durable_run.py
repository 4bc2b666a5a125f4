"""``manage.py durable_run ID``: one run and its history as a timeline."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

import durable
from durable import runtime
from durable.exceptions import InvalidInput, RunNotFound
from durable.management import cli
from durable.management.render import checkpoint_dict, run_dict, run_text, to_json


class Command(cli.OperatorCommand):
    help = "Show one run: its status, payloads and history (text, or JSON with --json)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", metavar="RUN_ID")
        parser.add_argument("--json", action="store_true", help="the run and its history as JSON")

    def handle(self, *args: Any, run_id: str, **options: Any) -> None:
        try:
            run = durable.get_run(run_id)
        except RunNotFound as exc:
            raise cli.failed(str(exc)) from None
        except InvalidInput as exc:
            raise cli.bad(str(exc)) from None
        checkpoints = runtime.get_engine().store.load_checkpoints(run_id)
        history = [checkpoints[seq] for seq in sorted(checkpoints)]
        if options["json"]:
            self.stdout.write(to_json({**run_dict(run), "history": [checkpoint_dict(cp) for cp in history]}))
            return
        self.stdout.write(run_text(run, history))
