"""Two indexes of the runs table that every write of a run maintained for nothing (PostgreSQL only).

No write of a run's status is a HOT update, so each such write adds an entry
to every index whose condition the new row meets:

- ``durable_run_tags_gin`` held an entry for every run, tagged or not (GIN
  keeps an "empty item" for a row without keys), and its pending list was
  flushed into the index by whichever write filled it. It is now partial:
  runs with at least one tag. A lookup by tag says ``tags <> '[]'`` so the
  planner may use it (:func:`durable.store.portable.run_reads.with_tag`).
- Django's ``LIKE`` index on the primary key (``varchar_pattern_ops``): no
  query of the engine, the admin or the API matches a run id by prefix (a
  search takes an exact id, served by the primary key).

Built and dropped ``CONCURRENTLY`` (so the migration is not atomic): a large
runs table keeps taking writes, and tag lookups keep an index throughout.
A later change of the ``id`` column's type would make Django create its
``LIKE`` index again; such a migration must drop it again.
"""

from django.db import migrations

TAGS = "durable_run_tags_gin"


def _like_indexes(schema_editor):  # type: ignore[no-untyped-def]
    """Names of the ``varchar_pattern_ops`` indexes on the runs table's primary key."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'durable_run' "
            "AND indexdef LIKE '%%(id varchar_pattern_ops)%%'"
        )
        return [row[0] for row in cursor.fetchall()]


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(f"DROP INDEX CONCURRENTLY IF EXISTS {TAGS}_partial")  # left by an interrupted run of this migration
    run(
        f"CREATE INDEX CONCURRENTLY {TAGS}_partial ON durable_run "
        "USING gin (tags jsonb_path_ops) WHERE tags <> '[]'::jsonb"
    )
    run(f"DROP INDEX CONCURRENTLY IF EXISTS {TAGS}")
    run(f"ALTER INDEX {TAGS}_partial RENAME TO {TAGS}")
    for name in _like_indexes(schema_editor):
        run(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(f"DROP INDEX CONCURRENTLY IF EXISTS {TAGS}_full")
    run(f"CREATE INDEX CONCURRENTLY {TAGS}_full ON durable_run USING gin (tags jsonb_path_ops)")
    run(f"DROP INDEX CONCURRENTLY IF EXISTS {TAGS}")
    run(f"ALTER INDEX {TAGS}_full RENAME TO {TAGS}")
    if not _like_indexes(schema_editor):
        run("CREATE INDEX CONCURRENTLY durable_run_id_like ON durable_run (id varchar_pattern_ops)")


class Migration(migrations.Migration):
    atomic = False  # CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [("durable", "0023_queue_admission_tally")]

    operations = [migrations.RunPython(forwards, backwards)]
