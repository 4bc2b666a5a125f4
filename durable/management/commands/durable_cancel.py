"""``manage.py durable_cancel``: cancel one run, or the runs the filters match (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from durable.management.bulk import RunActionCommand


class Command(RunActionCommand):
    help = (
        "Cancel a run and its children: durable_cancel RUN_ID, or durable_cancel --status running "
        "--workflow NAME [--dry-run] [--yes]. --compensate undoes completed steps first."
    )
    verb = "cancel"

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--compensate", action="store_true", help="undo completed steps first (their compensations)"
        )

    def action(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return ("cancel_compensate" if options["compensate"] else "cancel"), {}
