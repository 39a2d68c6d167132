"""The alert kind ``scheduled_overdue`` and the message search's index of FIFO messages by
message group. Not atomic: the index is built CONCURRENTLY, so sends go on while it builds (one
that fails part way leaves an INVALID index, to drop and build again)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("broker", "0021_fifo_blocked_message_groups"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="alertrule",
            name="alert_rule_kind_valid",
        ),
        migrations.AlterField(
            model_name="alert",
            name="kind",
            field=models.CharField(
                choices=[
                    ("oldest_pending", "Oldest Pending"),
                    ("near_check_max", "Near Check Max"),
                    ("group_unreachable", "Group Unreachable"),
                    ("discard_rate", "Discard Rate"),
                    ("dlq_growing", "Dlq Growing"),
                    ("fifo_blocked", "Fifo Blocked"),
                    ("scheduled_overdue", "Scheduled Overdue"),
                ],
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="alertrule",
            name="kind",
            field=models.CharField(
                choices=[
                    ("oldest_pending", "Oldest Pending"),
                    ("near_check_max", "Near Check Max"),
                    ("group_unreachable", "Group Unreachable"),
                    ("discard_rate", "Discard Rate"),
                    ("dlq_growing", "Dlq Growing"),
                    ("fifo_blocked", "Fifo Blocked"),
                    ("scheduled_overdue", "Scheduled Overdue"),
                ],
                max_length=32,
            ),
        ),
        AddIndexConcurrently(
            model_name="message",
            index=models.Index(
                condition=models.Q(("message_group", ""), _negated=True),
                fields=["message_group", "store_timestamp"],
                name="message_group_store_time",
            ),
        ),
        migrations.AddConstraint(
            model_name="alertrule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "kind__in",
                        [
                            "oldest_pending",
                            "near_check_max",
                            "group_unreachable",
                            "discard_rate",
                            "dlq_growing",
                            "fifo_blocked",
                            "scheduled_overdue",
                        ],
                    )
                ),
                name="alert_rule_kind_valid",
            ),
        ),
    ]
