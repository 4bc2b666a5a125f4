"""Admissions per minute counted on the queue's row; the index that served that count alone goes.

The counts start at zero: a queue shows its admissions per minute again from
its first grant after this migration.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durable", "0022_run_awaiting_steps")]

    operations = [
        migrations.RemoveIndex(model_name="checkpoint", name="durable_cp_queue_admitted"),
        migrations.AddField(
            model_name="queue",
            name="admitted_minute",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queue",
            name="admitted_count",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="queue",
            name="admitted_prior",
            field=models.IntegerField(db_default=0, default=0),
        ),
    ]
