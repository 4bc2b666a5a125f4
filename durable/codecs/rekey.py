"""Re-encoding stored payloads under the codec's current key (``manage.py durable_rekey``).

Walks every payload column of every durable table in primary-key order, a
batch of rows per transaction, and rewrites each value that is in clear or
under another key than the first of ``CODEC_KEYS``. Each rewrite is a
compare-and-set on the text read (``... WHERE pk = %s AND CAST(col AS TEXT) = %s``),
so a value the engine wrote meanwhile is left as it is (it was written under
the current key anyway) and nothing holds row locks between statements: live
turns are never blocked behind the rekey. A value that does not decode is
counted and left alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db import connection, models, transaction

from durable.codecs.fields import PayloadField
from durable.codecs.payloads import needs_rekey, open_value
from durable.codecs.protocol import Codec
from durable.engine.serialization import Undecodable

#: Rows read (and rewritten) per transaction unless told otherwise.
DEFAULT_BATCH = 500


@dataclass
class RekeyReport:
    """What a rekey found, per ``table.column``: rows rewritten (or to rewrite), and rows that did not decode."""

    rewritten: dict[str, int] = field(default_factory=dict)
    undecodable: dict[str, list[str]] = field(default_factory=dict)
    dry_run: bool = False

    @property
    def total(self) -> int:
        return sum(self.rewritten.values())


def payload_columns() -> Iterator[tuple[type[models.Model], list[PayloadField]]]:
    """Each durable model with its payload fields."""
    for model in apps.get_app_config("durable").get_models():
        fields = [f for f in model._meta.concrete_fields if isinstance(f, PayloadField)]
        if fields:
            yield model, fields


def rekey(codec: Codec, *, batch: int = DEFAULT_BATCH, dry_run: bool = False) -> RekeyReport:
    """Rewrite every stored payload under ``codec.key_id``; with ``dry_run`` only count them."""
    report = RekeyReport(dry_run=dry_run)
    for model, fields in payload_columns():
        for payload in fields:
            name = f"{model._meta.db_table}.{payload.column}"
            report.rewritten[name] = 0
            for rows in _batches(model, payload, batch):
                _rekey_rows(codec, model, payload, rows, report, name)
    return report


def _names(model: type[models.Model], payload: PayloadField) -> tuple[str, str, str]:
    """The quoted table, primary key and payload column names."""
    quote = connection.ops.quote_name
    return quote(model._meta.db_table), quote(str(model._meta.pk.column)), quote(str(payload.column))


def _batches(model: type[models.Model], payload: PayloadField, batch: int) -> Iterator[list[tuple[Any, str]]]:
    """(pk, stored text) of the column's non-null rows, ``batch`` at a time in primary-key order."""
    table, pk, column = _names(model, payload)
    last: Any = None
    while True:
        after = "" if last is None else f"AND {pk} > %s "
        sql = (
            f"SELECT {pk}, CAST({column} AS TEXT) FROM {table} WHERE {column} IS NOT NULL {after}ORDER BY {pk} LIMIT %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, ([] if last is None else [last]) + [batch])
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _rekey_rows(
    codec: Codec,
    model: type[models.Model],
    payload: PayloadField,
    rows: list[tuple[Any, str]],
    report: RekeyReport,
    name: str,
) -> None:
    write = _writer(model, payload)
    with transaction.atomic():
        for pk, text in rows:
            stored = json.loads(text)
            if not needs_rekey(codec, stored):
                continue
            value = open_value(codec, stored)
            if isinstance(value, Undecodable):
                report.undecodable.setdefault(name, []).append(f"{pk}: {value.reason}")
                continue
            if report.dry_run or write(pk, text, payload.seal(value)):
                report.rewritten[name] += 1


def _writer(model: type[models.Model], payload: PayloadField) -> Callable[[Any, str, Any], bool]:
    """A compare-and-set of one row's column: True when the row still held ``text`` and was rewritten."""
    table, pk, column = _names(model, payload)
    # The column's own type as a standard CAST (jsonb on PostgreSQL, text on SQLite).
    sql = (
        f"UPDATE {table} SET {column} = CAST(%s AS {payload.cast_db_type(connection)}) "
        f"WHERE {pk} = %s AND CAST({column} AS TEXT) = %s"
    )

    def write(pk: Any, text: str, value: Any) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(sql, [json.dumps(value, separators=(",", ":")), pk, text])
            return bool(cursor.rowcount)

    return write
