"""PostgreSQL plans the broker's per-send and per-end statements once per connection
(``HALFMOON_DB_PREPARE_THRESHOLD``, halfmoon/settings_database.py): their parameters are bound
server-side (``broker.plumbing.sql.statement_cursor``) and psycopg prepares a statement
once it has run that many times on a connection. Without it each
send and each end re-plans its whole CTE (1.5-2.5 ms of PostgreSQL CPU apiece on these
machines, docs/operations.md "Prepared statements")."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from tests.api_helpers import end, send_half

pytestmark = pytest.mark.django_db(transaction=True)  # as a request runs: no outer transaction


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_statements_are_prepared_at_the_threshold_and_the_orm_binds_client_side():
    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["prepare_threshold"] == 5  # HALFMOON_DB_PREPARE_THRESHOLD's default
    # Server-side binding for the ORM would send an int Value() as int4 (ms timestamps overflow).
    assert not options.get("server_side_binding")


def test_a_send_and_an_end_run_often_are_prepared_statements(owner, topic, producer_group):
    threshold = settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"]
    for _ in range(threshold + 1):
        tx = send_half(owner).json()["transaction_id"]
        assert end(owner, tx, "commit").status_code == 200

    statements = prepared_statements()
    # The send's statement (half message and transaction row) and the end's (resolution,
    # delivered message, new state), each with its JSON rows as one parameter.
    assert any(s.startswith("WITH half_items AS") and "$1::jsonb" in s for s in statements)
    assert any(s.startswith("WITH items AS") and "$1::jsonb" in s for s in statements)


def plan_of(sql: str, params: list) -> str:
    """PostgreSQL's plan of ``sql`` (EXPLAIN, parameters bound server-side as a send's)."""
    from broker.plumbing.sql import statement_cursor

    with statement_cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def never_analyzed(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples < 0 FROM pg_class WHERE oid = %s::regclass", [table])
        return cursor.fetchone()[0]


def test_an_end_locks_each_transaction_by_its_own_lookup_whatever_the_table_held_when_planned(
    topic, producer_group
):
    """A prepared statement keeps the generic plan made on its sixth run for the connection's
    life, and a pooled connection lives long. The end's statement locked its transactions by a
    join of its items with the table: planned while the table was small or never analyzed (a
    new broker; any table on a server without autovacuum, as on these machines), the join was
    a hash join over the whole table, kept as the table grew: every end read every
    transaction (bench/throughput.py's batches 2,600 messages/s instead of 3,800; docs/
    design.md "Prepared statements on growing tables"). Each item's row is now locked by a
    lookup of its own, in id order, which no plan can turn into a scan of the table per end."""
    from broker.services.transactions.resolution import PreparedEnd, _resolve_sql

    end = PreparedEnd("0" * 32, "G", "commit", "producer", "")
    sql, params = _resolve_sql([end], from_state="PREPARED")
    plan = plan_of(sql, params)
    locked = plan.split("CTE locked", 1)[1].split("CTE gate", 1)[0]
    assert "Hash" not in locked, plan
    assert "Nested Loop" in locked and "LockRows" in locked, plan
    if never_analyzed("broker_transaction"):  # as on a server without autovacuum
        assert "Index Scan using broker_transaction_pkey on broker_transaction" in locked, plan
