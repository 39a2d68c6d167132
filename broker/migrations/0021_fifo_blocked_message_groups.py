"""The operators' side of FIFO message groups: the index of a message group's messages in
queue order (what waits behind a blocked head), the audit action ``dead-letter-head`` and the
alert kind ``fifo_blocked``. Not atomic: the index is built CONCURRENTLY, so sends go on while
it builds (one that fails part way leaves an INVALID index, to drop and build again)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("broker", "0019_topic_message_types"),
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
                ],
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(
                choices=[
                    ("commit", "Commit"),
                    ("rollback", "Rollback"),
                    ("resume-check", "Resume Check"),
                    ("check-now", "Check Now"),
                    ("bulk-commit", "Bulk Commit"),
                    ("bulk-rollback", "Bulk Rollback"),
                    ("bulk-resume-check", "Bulk Resume Check"),
                    ("silence-alert", "Silence Alert"),
                    ("expire-silence", "Expire Silence"),
                    ("reset-offset", "Reset Offset"),
                    ("skip-backlog", "Skip Backlog"),
                    ("resend-message", "Resend Message"),
                    ("resend-dead-letter", "Resend Dead Letter"),
                    ("resend-dead-letters", "Resend Dead Letters"),
                    ("recall-message", "Recall Message"),
                    ("dead-letter-head", "Dead Letter Head"),
                ],
                max_length=24,
            ),
        ),
        AddIndexConcurrently(
            model_name="message",
            index=models.Index(
                condition=models.Q(("message_group", ""), _negated=True),
                fields=["topic", "queue_id", "message_group", "queue_offset"],
                name="message_group_order",
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
                        ],
                    )
                ),
                name="alert_rule_kind_valid",
            ),
        ),
    ]
