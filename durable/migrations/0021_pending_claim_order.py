"""Pending runs in the order a worker claims them: a page claim walks the index and stops at its page."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durable", "0020_queue_indexes_one_per_read"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "pending")),
                fields=["-priority", "created_at"],
                name="durable_run_pending",
            ),
        ),
    ]
