"""Migration 0015: the DLQ commit log offsets the dead-letter resends stored in
``AuditTarget.transaction_id`` move to ``AuditTarget.commit_log_offset``, and back."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("broker", "0014_consumer_group_ops")]
AFTER = [("broker", "0015_audit_target_commit_log_offset")]

pytestmark = pytest.mark.django_db(transaction=True)


def _migrate(targets: list[tuple[str, str]]):
    """Migrate the test database to ``targets``; the apps (models) as of there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


@pytest.fixture
def at_0014():
    """The database at 0014; back to the latest migrations afterwards."""
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    apps = _migrate(BEFORE)
    yield apps
    _migrate(leaves)


def _entry(apps, action: str):
    return apps.get_model("broker", "AuditEntry").objects.create(
        actor="console:olga", via="console", action=action, reason="r", state="done"
    )


def test_dead_letter_offsets_move_to_their_column_and_back(at_0014):
    target = at_0014.get_model("broker", "AuditTarget")
    resends = _entry(at_0014, "resend-dead-letters")
    target.objects.create(entry=resends, transaction_id="4096", result="done")
    target.objects.create(entry=resends, transaction_id="8192", result="pending")
    one = _entry(at_0014, "resend-dead-letter")
    target.objects.create(entry=one, transaction_id="4096", result="done")
    bulk = _entry(at_0014, "bulk-commit")
    target.objects.create(entry=bulk, transaction_id="7F0000011D2A18B4AAC2", result="done")

    after = _migrate(AFTER).get_model("broker", "AuditTarget")
    rows = after.objects.order_by("id").values_list(
        "entry_id", "transaction_id", "commit_log_offset", "result"
    )
    assert list(rows) == [
        (resends.pk, "", 4096, "done"),
        (resends.pk, "", 8192, "pending"),
        (one.pk, "", 4096, "done"),
        (bulk.pk, "7F0000011D2A18B4AAC2", None, "done"),
    ]

    before = _migrate(BEFORE).get_model("broker", "AuditTarget")
    assert list(before.objects.order_by("id").values_list("entry_id", "transaction_id")) == [
        (resends.pk, "4096"),
        (resends.pk, "8192"),
        (one.pk, "4096"),
        (bulk.pk, "7F0000011D2A18B4AAC2"),
    ]
