"""The message search's indexes (broker.selectors.message_search): a key by its partial
indexes, a topic by store time. Built CONCURRENTLY, so a broker holding millions of messages
keeps sending while they build. The migration is not atomic: one that fails part way leaves
an INVALID index, to drop (DROP INDEX CONCURRENTLY <name>) before migrating again."""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("broker", "0012_operator_grants"),
    ]

    operations = [
        RemoveIndexConcurrently(
            model_name="message",
            name="message_topic_keys",
        ),
        AddIndexConcurrently(
            model_name="message",
            index=models.Index(
                condition=models.Q(("keys", ""), _negated=True),
                fields=["keys"],
                name="message_keys",
            ),
        ),
        AddIndexConcurrently(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                models.Func(
                    models.F("keys"),
                    models.Value(" "),
                    function="string_to_array",
                    output_field=django.contrib.postgres.fields.ArrayField(
                        base_field=models.TextField(), size=None
                    ),
                ),
                condition=models.Q(("keys__contains", " ")),
                name="message_multi_keys",
            ),
        ),
        AddIndexConcurrently(
            model_name="message",
            index=models.Index(
                fields=["topic", "store_timestamp"], name="message_topic_store_time"
            ),
        ),
    ]
