"""Drop the ``varchar_pattern_ops`` ("_like") indexes Django's PostgreSQL backend adds beside
every indexed ``CharField`` on the write path of a transaction: the transaction id (primary
key of ``broker_transaction``, and the keys of ``broker_resolution`` and
``broker_checkrequest``) and a delivery's receipt handle. They serve only ``LIKE 'prefix%'``
queries, and nothing asks those of ids and handles (they are looked up whole, by the plain
btree indexes that stay); yet every insert, and every update of a transaction that is not HOT
(a commit changes the indexed ``state``), wrote an entry into them.

Dropped ``CONCURRENTLY`` (so outside a database transaction: the migration is not atomic), so a
live broker's writes wait for no lock on these tables while it runs. A later ``AlterField`` of
one of these fields would make Django create its index again: drop it in the same migration."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# (index, table, column): the names Django gave them (schema_editor._create_index_name).
LIKE_INDEXES = (
    ("broker_transaction_transaction_id_c6fcbd28_like", "broker_transaction", "transaction_id"),
    ("broker_resolution_transaction_id_1d15cfa6_like", "broker_resolution", "transaction_id"),
    ("broker_checkrequest_transaction_id_977c7c6f_like", "broker_checkrequest", "transaction_id"),
    ("broker_delivery_receipt_handle_1d9ae547_like", "broker_delivery", "receipt_handle"),
)


def like_indexes_drop(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """DROP INDEX CONCURRENTLY IF EXISTS each of ``LIKE_INDEXES`` (outside a database
    transaction)."""
    for index, _table, _column in LIKE_INDEXES:
        schema_editor.execute(
            f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(index)}"
        )


def like_indexes_create(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Create ``LIKE_INDEXES`` again as Django had them, ``CONCURRENTLY`` (outside a database
    transaction)."""
    quote = schema_editor.quote_name
    for index, table, column in LIKE_INDEXES:
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(index)} ON {quote(table)} "
            f"({quote(column)} varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    atomic = False  # CONCURRENTLY cannot run inside a transaction block
    dependencies = [("broker", "0008_alerts")]

    operations = [migrations.RunPython(like_indexes_drop, like_indexes_create)]
