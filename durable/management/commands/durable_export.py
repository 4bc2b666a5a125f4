"""``manage.py durable_export ID``: a run's recorded history as JSON, to replay in a test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from durable.exceptions import InvalidInput, RunNotFound
from durable.management import cli
from durable.testing.replay import export_history


class Command(cli.OperatorCommand):
    help = (
        "Write a run and its checkpoints as JSON (stdout, or --output FILE); replay it against your "
        "code in a test with durable.testing.assert_replayable(durable.testing.load_history(FILE))."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", metavar="RUN_ID")
        parser.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")

    def handle(self, *args: Any, run_id: str, **options: Any) -> None:
        try:
            doc = export_history(run_id)
        except RunNotFound as exc:
            raise cli.failed(str(exc)) from None
        except InvalidInput as exc:
            raise cli.bad(str(exc)) from None
        text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
        if not options["output"]:
            self.stdout.write(text, ending="")
            return
        try:
            Path(options["output"]).write_text(text)
        except OSError as exc:
            raise cli.failed(f"cannot write {options['output']}: {exc.strerror or exc}") from None
        count = len(doc["checkpoints"])
        self.stdout.write(f"run {run_id}: {count} checkpoint(s) written to {options['output']}")
