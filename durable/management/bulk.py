"""The single-or-bulk form of the write commands (``durable_cancel``, ``durable_requeue``).

``durable_cancel RUN_ID`` acts on one run. ``durable_cancel --status running
--workflow checkout`` acts on every run the filters of ``durable_runs`` match
(at most ``--limit``): it lists them, asks ``Cancel 12 run(s)? [y/N]`` unless
``--yes`` is given, and with ``--dry-run`` only lists them. A run id and
filters together, or neither, are bad arguments (exit 2). Bulk forms need at
least one filter, so no command acts on every run by accident.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from durable.management import cli

BULK_LIMIT = 1000


class RunActionCommand(cli.OperatorCommand):
    """A write command on one run or on the runs the filters match."""

    verb = ""  # "cancel", for messages

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_bulk_flags(parser, limit=BULK_LIMIT)
        parser.add_argument("--reason", default="", help="why (kept in the audit log and shown on the run)")

    def action(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The operation's name and parameters (see ``durable_dashboard.operations.RUN_ACTIONS``)."""
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        action, params = self.action(options)
        run_id = options["run_id"]
        if run_id and cli.has_filters(options):
            raise cli.bad("give a run id or filters, not both")
        if not run_id and not cli.has_filters(options):
            raise cli.bad(f"give a run id, or choose runs with filters (--status, --workflow, ...) to {self.verb}")
        if run_id:
            self._one(run_id, action, params, options)
        else:
            self._many(action, params, options)

    def _one(self, run_id: str, action: str, params: dict[str, Any], options: dict[str, Any]) -> None:
        if options["dry_run"]:
            self.stdout.write(f"dry run: would {self.verb} {run_id}")
            return
        (outcome,) = cli.act(action, [run_id], params, reason=options["reason"])
        if not outcome.ok:
            raise cli.refuse(outcome)
        self.stdout.write(f"{run_id}: {outcome.message}")

    def _many(self, action: str, params: dict[str, Any], options: dict[str, Any]) -> None:
        runs, more = cli.select(options)
        note = "(more runs match: this acts on the first {count}; run it again for the rest)"
        if not cli.show_runs(self, runs, more, note):
            return
        if options["dry_run"]:
            self.stdout.write(f"dry run: would {self.verb} {len(runs)} run(s)")
            return
        if not options["yes"] and not cli.confirm(self, f"{self.verb.capitalize()} {len(runs)} run(s)?", options):
            raise cli.failed("not confirmed; nothing changed")
        outcomes = cli.act(action, [r.id for r in runs], params, reason=options["reason"])
        for outcome in outcomes:
            self.stdout.write(f"{outcome.run_id}: {'' if outcome.ok else 'FAILED '}{outcome.message}")
        refused = [o for o in outcomes if not o.ok]
        if refused:
            raise cli.failed(f"{len(refused)} of {len(outcomes)} run(s) refused")
        self.stdout.write(f"{self.verb}: {len(outcomes)} run(s) done")
