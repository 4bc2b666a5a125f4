"""A suspension's count of dispatched steps it still waits on: a fan-out woken once, not by each result."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durable", "0021_pending_claim_order")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="awaiting_steps",
            field=models.IntegerField(blank=True, null=True),
        ),
    ]
