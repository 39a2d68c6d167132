"""The console's operator actions: one transaction's buttons, bulk preview / confirm / report,
the audit page; who may use them and CSRF."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from broker.models import AuditEntry, Transaction
from broker.services.operations.bulk import bulk_run
from broker.services.transactions.end import transaction_end
from tests.console.conftest import signed_in
from tests.services.test_operator import discarded
from tests.support import prepare

ACTIONS = ["commit", "rollback", "resume-check", "check-now"]


def action_url(tx: Transaction, action: str) -> str:
    return f"/console/transactions/{tx.pk}/actions/{action}/"


def said(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    signed_in(client, "operator", username="olga")
    return client


@pytest.fixture
def viewer(db) -> Client:
    client = Client()
    signed_in(client, "viewer", username="vic")
    return client


# --- Who may act --------------------------------------------------------------------------------


def test_a_viewer_gets_403_on_every_action_and_changes_nothing(viewer, topic, producer_group):
    tx = prepare()
    bulk = operator_preview(tx)
    for action in ACTIONS:
        assert viewer.post(action_url(tx, action), {"reason": "r"}).status_code == 403
    assert viewer.post("/console/bulk/", {"action": "rollback", "reason": "r"}).status_code == 403
    assert viewer.post(f"/console/bulk/{bulk.pk}/apply/").status_code == 403
    tx.refresh_from_db()
    bulk.refresh_from_db()
    assert (tx.state, bulk.state) == ("PREPARED", "previewed")
    assert AuditEntry.objects.count() == 1


def operator_preview(tx: Transaction) -> AuditEntry:
    from broker.services.operations.bulk import bulk_preview_selection

    return bulk_preview_selection(
        action="rollback", reason="r", actor="console:x", via="console", transaction_ids=[tx.pk]
    )


def test_anonymous_visitors_are_sent_to_sign_in(client, topic, producer_group):
    tx = prepare()
    response = client.post(action_url(tx, "commit"), {"reason": "r"})
    assert response.status_code == 302 and "/console/login/" in response["Location"]
    assert client.get("/console/audit/").status_code == 302


def test_every_action_needs_the_csrf_token(db, topic, producer_group):
    tx = prepare()
    client = Client(enforce_csrf_checks=True)
    signed_in(client, "operator", username="csrf")
    assert client.post(action_url(tx, "check-now"), {"reason": "r"}).status_code == 403
    assert client.post("/console/bulk/", {"action": "rollback", "reason": "r"}).status_code == 403
    tx.refresh_from_db()
    assert tx.next_check_timestamp != 0 and not AuditEntry.objects.exists()

    page = client.get(f"/console/transactions/{tx.pk}/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert token, "the action forms carry the token"
    response = client.post(
        action_url(tx, "check-now"), {"reason": "r", "csrfmiddlewaretoken": token.group(1)}
    )
    assert response.status_code == 302
    assert AuditEntry.objects.get().action == "check-now"


# --- One transaction ----------------------------------------------------------------------------


def test_an_operator_commits_with_a_reason_and_is_told_what_happened(
    operator, topic, producer_group
):
    tx = prepare()
    response = operator.post(action_url(tx, "commit"), {"reason": "producer lost its state"})

    assert response.status_code == 302
    assert response["Location"] == f"/console/transactions/{tx.pk}/"
    tx.refresh_from_db()
    assert (tx.state, tx.resolved_by) == ("COMMITTED", "operator")
    assert said(response) == [
        f"Committed {tx.pk}: delivered to TranTest queue {tx.queue_id} "
        f"(queue offset {tx.queue_offset})."
    ]
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.via, entry.reason) == (
        "console:olga",
        "console",
        "producer lost its state",
    )


def test_an_action_without_a_reason_is_refused(operator, topic, producer_group):
    tx = prepare()
    response = operator.post(action_url(tx, "rollback"), {"reason": "  "})
    assert response.status_code == 302
    assert said(response) == ["rollback refused: An operator action needs a reason."]
    tx.refresh_from_db()
    assert tx.state == "PREPARED"


def test_an_action_on_an_ended_transaction_says_who_ended_it(operator, topic, producer_group):
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    response = operator.post(action_url(tx, "rollback"), {"reason": "stuck"})
    [message] = said(response)
    assert f"rollback refused: Transaction {tx.pk} is already COMMITTED by its producer at " in (
        message
    )
    assert AuditEntry.objects.get().state == "refused"


def test_an_unknown_action_is_404(operator, topic, producer_group):
    tx = prepare()
    assert operator.post(action_url(tx, "delete"), {"reason": "r"}).status_code == 404
    assert operator.get(action_url(tx, "commit")).status_code == 405


def test_resume_and_check_now_through_the_console(operator, topic, producer_group):
    gone, pending = discarded(prepare()), prepare()
    operator.post(action_url(gone, "resume-check"), {"reason": "producer fixed"})
    operator.post(action_url(pending, "check-now"), {"reason": "look now"})
    gone.refresh_from_db()
    assert (gone.state, gone.check_times) == ("PREPARED", 0)
    assert list(AuditEntry.objects.order_by("id").values_list("action", "state")) == [
        ("resume-check", "done"),
        ("check-now", "done"),
    ]


def buttons(client: Client, tx: Transaction) -> set[str]:
    html = client.get(f"/console/transactions/{tx.pk}/").content.decode()
    return set(re.findall(r'/actions/([a-z-]+)/"', html))


def test_the_page_shows_only_the_actions_the_state_allows(operator, viewer, topic, producer_group):
    pending, gone, ended = prepare(), discarded(prepare()), prepare()
    transaction_end(transaction_id=ended.pk, producer_group="G", action="rollback")

    assert buttons(operator, pending) == {"commit", "rollback", "check-now"}
    assert buttons(operator, gone) == {"commit", "rollback", "resume-check"}
    assert buttons(operator, ended) == set()
    html = operator.get(f"/console/transactions/{ended.pk}/").content.decode()
    assert "No action: this transaction has ended — ROLLED_BACK by producer" in html
    page = operator.get(f"/console/transactions/{gone.pk}/").content.decode()
    assert "It is NOT committed" in page and "This cannot be undone." in page
    assert buttons(viewer, pending) == set()


# --- Bulk ---------------------------------------------------------------------------------------


def test_a_bulk_rollback_on_a_filter_previews_applies_and_reports(
    operator, viewer, topic, producer_group, django_capture_on_commit_callbacks
):
    txs = [prepare(), prepare(), discarded(prepare())]
    response = operator.post(
        "/console/bulk/",
        {"action": "rollback", "reason": "incident 9", "scope": "filter", "group": "G"},
    )
    assert response.status_code == 302
    bulk = AuditEntry.objects.get(action="bulk-rollback")
    assert response["Location"] == f"/console/bulk/{bulk.pk}/"
    late = prepare()

    page = operator.get(response["Location"]).content.decode()
    assert '<strong id="bulk-total">3</strong>' in page
    assert all(t.pk in page for t in txs) and late.pk not in page
    assert "Confirming rolls back exactly these 3 transactions" in page
    assert f'action="/console/bulk/{bulk.pk}/apply/"' in page
    assert "/apply/" not in viewer.get(response["Location"]).content.decode()

    with django_capture_on_commit_callbacks(execute=False) as queued:
        applied = operator.post(f"/console/bulk/{bulk.pk}/apply/")
    assert applied.status_code == 302 and len(queued) == 1
    bulk_run(bulk.pk)

    report = viewer.get(f"/console/bulk/{bulk.pk}/").content.decode()
    assert "3 done, 0 already ended, 0 failed" in report
    assert 'id="bulk-progress"' in report and "console/bulk.js" in report
    late.refresh_from_db()
    assert late.state == "PREPARED"


def test_a_bulk_on_a_selection_and_its_refusals(operator, topic, producer_group):
    a, b = prepare(), prepare()
    response = operator.post(
        "/console/bulk/",
        {"action": "commit", "reason": "r", "scope": "selection", "transaction_id": [a.pk, b.pk]},
    )
    bulk = AuditEntry.objects.get(action="bulk-commit")
    assert response["Location"] == f"/console/bulk/{bulk.pk}/" and bulk.total == 2

    nothing = operator.post(
        "/console/bulk/", {"action": "commit", "reason": "r", "scope": "selection"}
    )
    assert said(nothing) == ["Select at least one transaction."]
    no_reason = operator.post(
        "/console/bulk/",
        {"action": "commit", "scope": "filter", "group": "G", "min_checks": "0"},
    )
    assert no_reason["Location"] == "/console/transactions/?group=G&min_checks=0"
    assert said(no_reason)[-1] == "An operator action needs a reason."
    resume = operator.post(
        "/console/bulk/", {"action": "resume-check", "reason": "r", "scope": "filter"}
    )
    assert "No transaction in this scope can be changed by resume-check" in said(resume)[-1]
    assert operator.get("/console/bulk/999999/").status_code == 404


# --- Audit page ---------------------------------------------------------------------------------


def test_the_audit_page_lists_actions_filtered_in_the_url(operator, viewer, topic, producer_group):
    a, b = prepare(), prepare()
    operator.post(action_url(a, "check-now"), {"reason": "look at a"})
    operator.post(action_url(b, "rollback"), {"reason": "drop b"})

    html = viewer.get("/console/audit/").content.decode()
    assert html.index("drop b") < html.index("look at a")  # newest first
    assert f'href="/console/transactions/{a.pk}/"' in html
    only = viewer.get("/console/audit/", {"action": "check-now", "actor": "olga"}).content.decode()
    assert "look at a" in only and "drop b" not in only
    by_tx = viewer.get("/console/audit/", {"transaction_id": b.pk}).content.decode()
    assert "drop b" in by_tx and "look at a" not in by_tx
    assert viewer.get("/console/audit/", {"since": "not a date"}).status_code == 400
