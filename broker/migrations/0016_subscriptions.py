"""Consumer groups' subscriptions (broker.models.Subscription) and the tag filter's index
(message_queue_tag, read by a receive with a tag filter). The index is built CONCURRENTLY, so a
broker holding millions of messages keeps sending while it builds. The migration is not
atomic: one that fails part way leaves an INVALID index, to drop (DROP INDEX CONCURRENTLY
message_queue_tag) before migrating again."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import broker.rules.clock


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("broker", "0015_audit_target_commit_log_offset"),
    ]

    operations = [
        migrations.CreateModel(
            name="Subscription",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("consumer_group", models.CharField(max_length=127)),
                ("topic", models.CharField(max_length=127)),
                (
                    "expression_type",
                    models.CharField(
                        choices=[("TAG", "Tag"), ("SQL92", "Sql92")], default="TAG", max_length=8
                    ),
                ),
                ("expression", models.TextField(default="*")),
                ("updated_timestamp", models.BigIntegerField(default=broker.rules.clock.now_ms)),
            ],
            options={
                "ordering": ["consumer_group", "topic"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("consumer_group", "topic"), name="one_subscription"
                    )
                ],
            },
        ),
        AddIndexConcurrently(
            model_name="message",
            index=models.Index(
                condition=models.Q(("tags", ""), _negated=True),
                fields=["topic", "queue_id", "tags", "queue_offset"],
                name="message_queue_tag",
            ),
        ),
    ]
