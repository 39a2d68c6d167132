"""The write path's tables carry no ``varchar_pattern_ops`` index (migration 0009): ids and
receipt handles are looked up whole, by the btree indexes that stay."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

migration = importlib.import_module("broker.migrations.0009_drop_unused_like_indexes")


def indexes(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = %s",
            [table],
        )
        return dict(cursor.fetchall())


@pytest.mark.parametrize("index, table, column", migration.LIKE_INDEXES)
def test_the_write_path_has_no_like_index_but_keeps_its_lookup_index(index, table, column):
    found = indexes(table)
    assert index not in found
    assert not [name for name, ddl in found.items() if "pattern_ops" in ddl]
    # The whole-value lookups keep their index: the primary key, the unique or the FK's.
    assert [name for name, ddl in found.items() if ddl.endswith(f"btree ({column})")]


@pytest.mark.django_db(transaction=True)  # CONCURRENTLY runs outside a transaction block
def test_the_migration_drops_what_it_would_put_back():
    with connection.schema_editor(atomic=False) as editor:
        migration.like_indexes_create(None, editor)
    for index, table, _column in migration.LIKE_INDEXES:
        assert "varchar_pattern_ops" in indexes(table)[index]
    with connection.schema_editor(atomic=False) as editor:
        migration.like_indexes_drop(None, editor)
    for index, table, _column in migration.LIKE_INDEXES:
        assert index not in indexes(table)
