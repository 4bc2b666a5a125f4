"""``manage.py durable_prune``: delete finished runs past their retention age now (``--dry-run``: count them)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import CommandParser

from durable import runtime
from durable.engine.durations import to_seconds
from durable.engine.vocab import TERMINAL
from durable.exceptions import InvalidInput
from durable.management import cli
from durable.management.render import to_json
from durable.worker.retention import PruneReport, prune

_STATUSES = [str(status) for status in TERMINAL]


class Command(cli.OperatorCommand):
    help = (
        "Delete finished runs past their retention age (DURABLE['RETENTION'], workflows' retention=) with every "
        "row keyed to them, batch by batch, each batch archived first; runs an active run still needs are kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what it would delete, delete nothing")
        parser.add_argument(
            "--older-than", metavar="AGE", help="delete runs finished longer ago than AGE (30d, 12h...) instead"
        )
        parser.add_argument(
            "--status", action="append", metavar="STATUS", help=f"only these statuses ({', '.join(_STATUSES)})"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument(
            "--fast",
            action="store_true",
            help="no rest between batches (by default it rests 3x each batch's time, to spare the live work)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        statuses = _statuses(options["status"])
        older_than = _age(options["older_than"])
        pace = None if options["fast"] else time.sleep
        engine = runtime.get_engine()
        report = prune(engine, statuses=statuses, older_than=older_than, dry_run=options["dry_run"], pace=pace)
        if options["json"]:
            self.stdout.write(to_json(_as_dict(report)))
        else:
            self.stdout.write(_text(report))
        if report.archive_error is not None:
            raise cli.failed(f"the archive hook failed, that batch was kept: {report.archive_error}")


def _statuses(given: list[str] | None) -> list[str] | None:
    if not given:
        return None
    chosen = [part.strip() for text in given for part in text.split(",") if part.strip()]
    for status in chosen:
        if status not in _STATUSES:
            raise cli.bad(f"--status must be one of {', '.join(_STATUSES)} (finished runs only), got {status!r}")
    return list(dict.fromkeys(chosen))


def _age(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = to_seconds(text)
    except InvalidInput as exc:
        raise cli.bad(f"--older-than: {exc}") from None
    if seconds <= 0:
        raise cli.bad(f"--older-than must be a positive age, got {text!r}")
    return seconds


def _as_dict(report: PruneReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "runs": report.runs,
        "total": report.count,
        "rows": report.rows,
        "kept": report.kept,
        "batches": report.batches,
        "busy_seconds": round(report.busy, 3),
        "archive_error": report.archive_error,
    }


def _text(report: PruneReport) -> str:
    verb = "would delete" if report.dry_run else "deleted"
    per_status = ", ".join(f"{status} {count:,}" for status, count in sorted(report.runs.items()))
    line = f"{verb} {report.count:,} run(s)" + (f" ({per_status})" if per_status else "")
    if not report.dry_run:
        line += f" in {report.batches} batch(es)"
    if report.kept:
        line += f"; kept {report.kept:,} that an active run still needs"
    return line
