"""The console's bulk actions in the API (``/api/v1/bulk-actions``): preview a frozen set from
a selection or the stuck list's filter, read it and its targets, confirm it; the worker's run
applies it to the frozen set only. Rights as in the console: an admin key operates every
producer group, a key with operator grants its own groups only, any other key nothing."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from broker.models import AuditEntry, Transaction
from broker.services.operations.bulk import BULK_RUN_TASK, bulk_run
from broker.services.topology.writes import producer_group_create
from tests.api.test_scoped_operator_keys import scoped_key
from tests.api_helpers import assert_error, post
from tests.services.test_operator import discarded
from tests.support import prepare

URL = "/api/v1/bulk-actions"


@pytest.fixture
def groups(topic):
    producer_group_create(name="payments", check_url=None)
    producer_group_create(name="orders", check_url=None)


@pytest.fixture
def payments_ops(db) -> APIClient:
    """Operates producer group payments only."""
    return scoped_key("payments-ops", producer=["payments"])


def state(tx: Transaction) -> str:
    tx.refresh_from_db()
    return tx.state


def test_an_admin_previews_a_selection_and_nothing_changes_until_it_is_applied(
    owner, groups, django_capture_on_commit_callbacks
):
    mine, other = prepare(producer_group="payments"), prepare(producer_group="orders")

    preview = post(
        owner,
        URL,
        {"action": "rollback", "reason": "INC-2207", "transaction_ids": [mine.pk, other.pk]},
    )

    assert preview.status_code == 201, preview.content
    bulk = preview.json()
    assert (bulk["action"], bulk["state"], bulk["total"], bulk["via"]) == (
        "rollback",
        "previewed",
        2,
        "api",
    )
    assert bulk["actor"] == "operator:owner"
    assert (state(mine), state(other)) == ("PREPARED", "PREPARED")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        applied = post(owner, f"{URL}/{bulk['bulk_id']}/apply")
    assert applied.status_code == 202, applied.content
    assert (applied.json()["state"], applied.json()["applied_by"]) == ("queued", "operator:owner")
    assert len(callbacks) == 1  # the run is sent to a worker once this commits

    bulk_run(bulk["bulk_id"])  # what the worker's task BULK_RUN_TASK does

    assert (state(mine), state(other)) == ("ROLLED_BACK", "ROLLED_BACK")
    done = owner.get(f"{URL}/{bulk['bulk_id']}").json()
    assert (done["state"], done["processed"], done["counts"]["done"]) == ("done", 2, 2)
    targets = owner.get(f"{URL}/{bulk['bulk_id']}/targets").json()
    assert targets["count"] == 2
    assert {t["transaction_id"]: t["result"] for t in targets["results"]} == {
        mine.pk: "done",
        other.pk: "done",
    }
    assert assert_error(post(owner, f"{URL}/{bulk['bulk_id']}/apply"), 409, "bulk_done")
    assert BULK_RUN_TASK == "tasks.operations.bulk_action_run"


def test_a_filter_freezes_what_matches_now_and_leaves_later_arrivals_alone(owner, groups):
    gone = discarded(prepare(producer_group="payments"))
    prepared = prepare(producer_group="payments")

    preview = post(
        owner,
        URL,
        {
            "action": "resume-check",
            "reason": "the check URL is fixed",
            "filter": {"states": ["DISCARDED"], "producer_group": "payments"},
        },
    )
    assert preview.status_code == 201, preview.content
    bulk = preview.json()
    assert bulk["total"] == 1
    assert bulk["scope"]["kind"] == "filter"
    later = discarded(prepare(producer_group="payments"))
    post(owner, f"{URL}/{bulk['bulk_id']}/apply")
    bulk_run(bulk["bulk_id"])

    assert (state(gone), state(prepared), state(later)) == ("PREPARED", "PREPARED", "DISCARDED")


def test_a_scoped_key_previews_only_its_groups_and_is_told_what_was_left_out(
    payments_ops, owner, groups
):
    mine, theirs = prepare(producer_group="payments"), prepare(producer_group="orders")

    preview = post(
        payments_ops,
        URL,
        {"action": "commit", "reason": "settled", "transaction_ids": [mine.pk, theirs.pk]},
    )

    assert preview.status_code == 201, preview.content
    bulk = preview.json()
    assert bulk["total"] == 1
    assert bulk["scope"]["excluded"]["count"] == 1
    assert bulk["scope"]["excluded"]["producer_groups"] == [
        {"producer_group": "orders", "count": 1}
    ]
    assert post(payments_ops, f"{URL}/{bulk['bulk_id']}/apply").status_code == 202

    only_theirs = post(
        payments_ops, URL, {"action": "commit", "reason": "x", "transaction_ids": [theirs.pk]}
    )
    assert assert_error(only_theirs, 403, "bulk_outside_scope")["details"]["excluded"]["count"] == 1

    admins = post(owner, URL, {"action": "commit", "reason": "x", "transaction_ids": [theirs.pk]})
    refused = post(payments_ops, f"{URL}/{admins.json()['bulk_id']}/apply")
    assert assert_error(refused, 403, "bulk_outside_scope")["details"]["producer_groups"] == [
        "orders"
    ]
    assert AuditEntry.objects.get(pk=admins.json()["bulk_id"]).state == "previewed"


def test_keys_without_operator_rights_are_refused(producer, outsider, groups):
    tx = prepare(producer_group="payments")
    body = {"action": "commit", "reason": "x", "transaction_ids": [tx.pk]}

    assert_error(post(producer, URL, body), 403, "permission_denied")
    assert_error(post(outsider, URL, body), 403, "permission_denied")
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"action": "commit", "transaction_ids": ["A1"]}, 400, "reason_required"),
        ({"action": "commit", "reason": "  ", "transaction_ids": ["A1"]}, 400, "reason_required"),
        ({"action": "explode", "reason": "x", "transaction_ids": ["A1"]}, 400, "invalid_input"),
        ({"action": "commit", "reason": "x"}, 400, "invalid_input"),
        (
            {"action": "commit", "reason": "x", "transaction_ids": ["A1"], "filter": {}},
            400,
            "invalid_input",
        ),
        ({"action": "commit", "reason": "x", "filter": {"states": ["COMMITTED"]}}, 400, None),
        ({"action": "commit", "reason": "x", "filter": {"min_age_ms": -1}}, 400, None),
        ({"action": "commit", "reason": "x", "transaction_ids": ["no/such"]}, 400, None),
        ({"action": "commit", "reason": "x", "transaction_ids": ["UNKNOWN1"]}, 400, "bulk_empty"),
    ],
)
def test_bad_previews_get_the_contracts_error_and_change_nothing(owner, groups, body, status, code):
    tx = prepare(producer_group="payments")

    assert_error(post(owner, URL, body), status, code)

    assert state(tx) == "PREPARED"
    assert not AuditEntry.objects.exists()


def test_an_unknown_bulk_is_404(owner, db):
    assert_error(owner.get(f"{URL}/999"), 404, "bulk_not_found")
    assert_error(owner.get(f"{URL}/999/targets"), 404, "bulk_not_found")
    assert_error(post(owner, f"{URL}/999/apply"), 404, "bulk_not_found")
