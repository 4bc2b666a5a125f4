"""``manage.py durable_rekey``: re-encrypt stored payloads under the first key of ``CODEC_KEYS``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from durable import runtime
from durable.codecs.rekey import DEFAULT_BATCH, RekeyReport, rekey
from durable.management import cli


def _batch_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise cli.bad(f"--batch-size must be a whole number, got {text!r}") from None
    if not 1 <= value <= 100_000:
        raise cli.bad(f"--batch-size must be between 1 and 100000, got {value}")
    return value


class Command(cli.OperatorCommand):
    help = (
        "Rewrite every stored payload (inputs, outputs, errors, signals, events...) that is in clear or under an "
        "older key with the first key of DURABLE['CODEC_KEYS'], in batches; afterwards the older keys can go."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count the rows to rewrite, write nothing")
        parser.add_argument(
            "--batch-size", default=DEFAULT_BATCH, metavar="N", help=f"rows per transaction (default {DEFAULT_BATCH})"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch = _batch_size(str(options["batch_size"]))
        codec = runtime.settings().codec
        if codec is None:
            raise cli.bad("DURABLE['CODEC'] is not set: there is no key to re-encrypt with")
        report = rekey(codec, batch=batch, dry_run=options["dry_run"])
        self.stdout.write(_text(report, codec.key_id))
        if report.undecodable:
            count = sum(len(rows) for rows in report.undecodable.values())
            raise cli.failed(
                f"{count} stored payload(s) did not decode with the keys listed and were left as they are "
                "(add the key they were written with to CODEC_KEYS and run again)"
            )


def _text(report: RekeyReport, key_id: str) -> str:
    verb = "would rewrite" if report.dry_run else "rewrote"
    lines = [f"{verb} {report.total} payload(s) under key {key_id!r}"]
    lines += [f"  {name}: {count}" for name, count in report.rewritten.items() if count]
    for name, rows in report.undecodable.items():
        lines += [f"  {name}: did not decode: {row}" for row in rows[:20]]
    return "\n".join(lines) + "\n"
