from django.db import migrations, models


def _tags_gin(apps, schema_editor):
    # Tag filters use JSON containment; on PostgreSQL a GIN index answers them without a scan.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS durable_run_tags_gin ON durable_run USING gin (tags jsonb_path_ops)"
        )


def _drop_tags_gin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS durable_run_tags_gin")


class Migration(migrations.Migration):
    dependencies = [
        ("durable", "0004_checkpoint_ordering"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["workflow", "status", "-created_at"], name="durable_run_wf_status_created"),
        ),
        migrations.RunPython(_tags_gin, _drop_tags_gin),
    ]
