"""Large tables fast: rows copied from one template row by ``INSERT ... SELECT`` over ``generate_series``.

Used by the benchmarks that need a table of a million finished runs
(``bench.prune``, ``bench.scale``): every column is copied as the ORM wrote it
in the template, only the ``replace`` columns are computed per row.
"""

from __future__ import annotations

from typing import Any


def copy_template(model: Any, template_pk: Any, replace: dict[str, str], series: str) -> None:
    """``INSERT INTO <table> SELECT`` every column of the template row, with ``replace`` columns as SQL."""
    from django.db import connection

    table = model._meta.db_table
    columns = [f.column for f in model._meta.concrete_fields if not f.primary_key or f.column in replace]
    select = [replace.get(column, f't."{column}"') for column in columns]
    names = ", ".join(f'"{c}"' for c in columns)
    pk = model._meta.pk.column
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{table}" ({names}) SELECT {", ".join(select)} FROM "{table}" t, {series} '
            f'WHERE t."{pk}" = %s',
            [template_pk],
        )
