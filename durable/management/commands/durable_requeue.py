"""``manage.py durable_requeue``: put failed or dead runs back to pending (audited)."""

from __future__ import annotations

from typing import Any

from durable.management.bulk import RunActionCommand


class Command(RunActionCommand):
    help = (
        "Requeue a failed or dead run: durable_requeue RUN_ID, or durable_requeue --status failed "
        "--workflow NAME [--dry-run] [--yes]."
    )
    verb = "requeue"

    def action(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "requeue", {}
