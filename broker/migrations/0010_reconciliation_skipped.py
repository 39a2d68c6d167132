"""A reconciliation run may be SKIPPED: the decision not to run (nothing archived yet, or
nothing settled since the last run) is recorded as a run with its ``reason`` and when the
oldest transaction not yet judged settles (``settles_timestamp``). With nothing archived such
a run has no window and no ``as_of``, so those columns may be NULL.

On PostgreSQL every operation is a catalogue change (a column added with a constant default,
NOT NULL dropped): no table rewrite, no long lock on a broker that is running."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("broker", "0009_drop_unused_like_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="reconciliationrun",
            name="reason",
            field=models.TextField(
                blank=True, default="", help_text="Why a skipped run did not run"
            ),
        ),
        migrations.AddField(
            model_name="reconciliationrun",
            name="settles_timestamp",
            field=models.BigIntegerField(
                blank=True,
                help_text="Skipped: when the oldest transaction not yet judged settles (ms)",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="reconciliationrun",
            name="as_of_timestamp",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="reconciliationrun",
            name="since_timestamp",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="reconciliationrun",
            name="state",
            field=models.CharField(
                choices=[
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("skipped", "Skipped"),
                ],
                default="running",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="reconciliationrun",
            name="until_timestamp",
            field=models.BigIntegerField(blank=True, null=True),
        ),
    ]
