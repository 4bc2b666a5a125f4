"""A limited queue's row counts its admissions per minute and when a step without a key was last admitted.

Both used to be read from indexes over the queue's admitted steps, whose
entries every later update of such a step writes again (its claim, its
heartbeats, its result). The index that served the per-minute count alone
goes; the round robin's index keeps only steps with a key. The time a step
without a key was last admitted is copied to each queue's row; the
per-minute counts start at zero (a queue shows them again from its first
grant after this migration).
"""

from django.db import migrations, models
from django.db.models import Max


def copy_unkeyed_served(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Each queue row takes the latest admission of its steps without a key (one index probe a queue)."""
    Queue = apps.get_model("durable", "Queue")
    Checkpoint = apps.get_model("durable", "Checkpoint")
    db = schema_editor.connection.alias
    for name in Queue.objects.using(db).values_list("name", flat=True):
        unkeyed = Checkpoint.objects.using(db).filter(queue=name, queue_key__isnull=True, admitted_at__isnull=False)
        last = unkeyed.aggregate(last=Max("admitted_at"))["last"]
        if last is not None:
            Queue.objects.using(db).filter(name=name).update(unkeyed_served_at=last)


class Migration(migrations.Migration):
    dependencies = [("durable", "0022_run_awaiting_steps")]

    operations = [
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
        migrations.AddField(
            model_name="queue",
            name="unkeyed_served_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        # Before the served index changes: the copy reads the steps without a key from it.
        migrations.RunPython(copy_unkeyed_served, migrations.RunPython.noop, elidable=True),
        migrations.RemoveIndex(model_name="checkpoint", name="durable_cp_queue_admitted"),
        migrations.RemoveIndex(model_name="checkpoint", name="durable_cp_queue_served"),
        migrations.AddIndex(
            model_name="checkpoint",
            index=models.Index(
                condition=models.Q(("admitted_at__isnull", False), ("queue_key__isnull", False)),
                fields=["queue", "queue_key", "admitted_at"],
                name="durable_cp_queue_served",
            ),
        ),
    ]
