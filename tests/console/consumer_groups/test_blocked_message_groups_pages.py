"""The console's blocked message groups (console.views.blocked_message_groups): Olga (a full
operator) sends a blocked head to the DLQ with a reason and the audit log shows it; Paula
operates consumer group ``other`` only (403, no controls on F); Vic, a viewer, sees the page
without controls; a group that is not FIFO says so."""

from __future__ import annotations

import pytest
from django.test import Client

from broker.models import AuditEntry, Delivery, Message
from broker.services.consumption.receive import messages_ack
from broker.services.topology.writes import consumer_group_create
from console.services import console_user_create
from tests.console.conftest import PASSWORD, signed_in
from tests.fifo_state import block_heads, fifo_group, send_group

PAGE = "/console/consumer-groups/F/blocked-message-groups/"
ACT = f"{PAGE}dead-letter-head/"


@pytest.fixture
def blocked(db) -> list[Message]:
    fifo_group("F", max_delivery_attempts=5)
    sent = send_group("order-1", 3)
    block_heads("F", failures=2)
    return sent


def _form(head: Message, reason: str = "poison order") -> dict[str, str]:
    return {
        "topic": "Orders",
        "message_group": "order-1",
        "msg_id": head.msg_id,
        "reason": reason,
    }


def test_the_group_page_shows_the_fifo_flag_and_links_the_blocked_groups(client, blocked):
    signed_in(client, "viewer")
    page = client.get("/console/consumer-groups/F/").content.decode()
    assert "FIFO: <strong>yes</strong>" in page
    assert 'id="blocked-count">1</strong>' in page and PAGE in page
    assert f"/console/messages/{blocked[0].commit_log_offset}/" in page
    consumer_group_create(name="N")
    plain = client.get("/console/consumer-groups/N/").content.decode()
    assert "FIFO: <strong>no</strong>" in plain and "blocked-summary" not in plain


def test_a_viewer_sees_the_head_its_attempts_and_what_waits_without_controls(client, blocked):
    signed_in(client, "viewer")
    page = client.get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-message-group="order-1"' in html
    assert (
        blocked[0].msg_id in html and f"/console/messages/{blocked[0].commit_log_offset}/" in html
    )
    assert "3 of 5" in html  # attempts of the group's max
    assert '<td class="num">2</td>' in html  # waiting behind
    assert "dead-letter-head" not in html
    assert client.post(ACT, _form(blocked[0])).status_code == 403
    assert Delivery.objects.filter(consumer_group="F").exists()


def test_an_operator_sends_the_head_to_the_dlq_with_a_reason_and_the_audit_shows_it(
    client, blocked
):
    olga = signed_in(client, "operator", "olga")
    assert "dead-letter-head" in client.get(PAGE).content.decode()
    # No reason: refused, nothing moved.
    refused = client.post(ACT, _form(blocked[0], reason=" "), follow=True)
    assert "Not sent to the DLQ" in refused.content.decode()
    assert Delivery.objects.filter(consumer_group="F").exists()

    done = client.post(ACT, _form(blocked[0]), follow=True)
    html = done.content.decode()
    assert "Sent to the DLQ" in html and "No message group is blocked." in html
    entry = AuditEntry.objects.get(action="dead-letter-head")
    assert (entry.actor, entry.via, entry.reason) == (
        f"console:{olga.username}",
        "console",
        "poison order",
    )
    audit = client.get("/console/audit/", {"action": "dead-letter-head"}).content.decode()
    assert blocked[0].msg_id in audit and "poison order" in audit and "order-1" in audit
    assert "dead-letter-head" in client.get("/console/consumer-groups/F/").content.decode()
    # The page was stale: the head it showed is gone.
    again = client.post(ACT, _form(blocked[0]), follow=True).content.decode()
    assert "is not blocked" in again


def test_a_head_acked_meanwhile_is_refused_on_the_page(client, blocked):
    signed_in(client, "operator")
    handle = Delivery.objects.get(consumer_group="F").receipt_handle
    messages_ack(consumer_group="F", receipt_handles=[handle])
    html = client.post(ACT, _form(blocked[0]), follow=True).content.decode()
    assert "Not sent to the DLQ" in html and "is not blocked" in html
    assert not AuditEntry.objects.filter(action="dead-letter-head").exists()


def test_a_scoped_operator_acts_on_its_groups_only(blocked):
    consumer_group_create(name="other")
    paula = Client()
    paula.force_login(
        console_user_create(
            username="paula", role="operator", password=PASSWORD, consumer_groups=["other"]
        )
    )
    assert "dead-letter-head" not in paula.get(PAGE).content.decode()
    assert paula.post(ACT, _form(blocked[0])).status_code == 403
    assert not AuditEntry.objects.filter(action="dead-letter-head").exists()


def test_a_group_that_is_not_fifo_says_so(client, db):
    consumer_group_create(name="N")
    signed_in(client, "viewer")
    html = client.get("/console/consumer-groups/N/blocked-message-groups/").content.decode()
    assert 'id="not-fifo"' in html
    assert client.get("/console/consumer-groups/nope/blocked-message-groups/").status_code == 404
