"""``/console/scheduled/``: the scheduled messages by due time with their filters in the URL,
one's page with its timeline, and the operators' Recall (reason required, audited; a scoped
operator only for its producer groups' messages); the message search and a message's page
show what is or was scheduled; the audit log links a recall to its message."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from broker.models import AuditEntry, Message, ScheduledMessage
from broker.rules.clock import now_ms
from broker.services.timers.deliver import scheduled_messages_deliver
from broker.services.timers.schedule import message_send_at
from broker.services.topology.writes import producer_group_create
from console.services import console_user_create
from tests.console.conftest import PASSWORD, signed_in

pytestmark = pytest.mark.usefixtures("topic", "producer_group")

HOUR = 3_600_000


def client_as(role: str, **grants) -> Client:
    client = Client()
    if grants:
        client.force_login(
            console_user_create(username="paula", role=role, password=PASSWORD, **grants)
        )
    else:
        signed_in(client, role)
    return client


def schedule(msg_id: str, *, due: int | None = None, keys: str = "", group: str = "G"):
    return message_send_at(
        delivery_timestamp=due or now_ms() + HOUR,
        topic="TranTest",
        body=b"cancel order 7",
        keys=keys,
        msg_id=msg_id,
        producer_group=group,
    )


def listed(client: Client, **query) -> list[str]:
    html = client.get("/console/scheduled/", query).content.decode()
    return re.findall(r'<tr data-msg-id="([^"]+)"', html)


def test_the_list_is_by_due_time_with_its_filters_in_the_url(db):
    viewer = client_as("viewer")
    now = now_ms()
    schedule("A", due=now + 3 * HOUR, keys="order-1")
    schedule("B", due=now + HOUR, keys="order-2 eu")
    schedule("C", due=now + 2 * HOUR, keys="order-3")
    ScheduledMessage.objects.filter(msg_id="C").update(state="RECALLED")

    page = viewer.get("/console/scheduled/")
    assert page.status_code == 200
    assert 'aria-current="page">Scheduled messages</a>' in page.content.decode()
    assert listed(viewer) == ["B", "A"]  # the waiting ones, earliest due first
    assert listed(viewer, state="any") == ["B", "C", "A"]
    assert listed(viewer, state="RECALLED") == ["C"]
    assert listed(viewer, key="eu") == ["B"]
    assert listed(viewer, topic="Other") == []
    after = time_text(now + HOUR + 60_000)
    assert listed(viewer, state="any", due_after=after) == ["C", "A"]
    assert listed(viewer, state="any", due_before=after) == ["B"]
    assert viewer.get("/console/scheduled/", {"state": "LOST"}).status_code == 400
    assert viewer.get("/console/scheduled/", {"due_after": "soon"}).status_code == 400


def time_text(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_the_list_pages(db):
    viewer = client_as("viewer")
    now = now_ms()
    for i in range(55):
        schedule(f"P-{i:02}", due=now + HOUR + i)
    first = listed(viewer)
    assert len(first) == 50 and first[0] == "P-00"
    html = viewer.get("/console/scheduled/", {"page": 2}).content.decode()
    assert re.findall(r'<tr data-msg-id="([^"]+)"', html) == [f"P-{i}" for i in range(50, 55)]
    assert "page 2 of 2" in html


def test_a_waiting_messages_page_shows_its_timeline_and_recall_for_operators(db):
    row = schedule("W-1", keys="order-7")
    url = f"/console/scheduled/{row.commit_log_offset}/"

    viewer_page = client_as("viewer").get(url).content.decode()
    assert 'id="recall-form"' not in viewer_page
    assert re.findall(r'data-kind="([a-z]+)"', viewer_page) == ["sent", "due"]
    assert f'href="/console/messages/{row.commit_log_offset}/"' in viewer_page  # as sent
    operator_page = client_as("operator").get(url).content.decode()
    assert 'id="recall-form"' in operator_page
    assert client_as("viewer").get("/console/scheduled/999999/").status_code == 404


def test_an_operator_recalls_with_a_reason_and_it_is_audited(db):
    operator = client_as("operator")
    row = schedule("R-1")
    recall = f"/console/scheduled/{row.commit_log_offset}/recall/"

    refused = operator.post(recall, {"reason": "  "}, follow=True)
    assert "Not recalled: An operator action needs a reason." in refused.content.decode()
    assert ScheduledMessage.objects.get().state == "SCHEDULED"
    assert not AuditEntry.objects.exists()

    done = operator.post(recall, {"reason": "customer paid"}, follow=True)
    html = done.content.decode()
    assert "it will never be delivered" in html
    row.refresh_from_db()
    assert (row.state, row.recall_reason) == ("RECALLED", "customer paid")
    assert row.recalled_by.startswith("console:operator-")
    assert re.findall(r'data-kind="([a-z]+)"', html) == ["sent", "recalled", "due"]
    assert 'id="recall-form"' not in html
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.actor) == ("recall-message", "console", row.recalled_by)
    assert scheduled_messages_deliver(now=now_ms() + 2 * HOUR) == 0

    audit = operator.get("/console/audit/", {"action": "recall-message"}).content.decode()
    assert f'href="/console/scheduled/{row.commit_log_offset}/"' in audit
    assert "customer paid" in audit


def test_who_may_recall(db):
    producer_group_create(name="payments", check_url=None)
    theirs, ours = schedule("O-1", group="G"), schedule("O-2", group="payments")
    paula = client_as("operator", producer_groups=["payments"])
    viewer = client_as("viewer")

    assert viewer.post(f"/console/scheduled/{ours.pk}/recall/", {"reason": "x"}).status_code == 403
    assert paula.post(f"/console/scheduled/{theirs.pk}/recall/", {"reason": "x"}).status_code == 403
    page = paula.get(f"/console/scheduled/{theirs.pk}/").content.decode()
    assert 'id="recall-form"' not in page and 'id="no-actions"' in page
    assert paula.post(f"/console/scheduled/{ours.pk}/recall/", {"reason": "x"}).status_code == 302
    states = dict(ScheduledMessage.objects.values_list("msg_id", "state"))
    assert states == {"O-1": "SCHEDULED", "O-2": "RECALLED"}


def test_a_recall_once_due_is_refused_and_a_delivered_one_links_its_copy(db):
    operator = client_as("operator")
    row = schedule("L-1")
    ScheduledMessage.objects.filter(pk=row.pk).update(delivery_timestamp=now_ms() - 1)

    page = operator.post(f"/console/scheduled/{row.pk}/recall/", {"reason": "x"}, follow=True)
    assert "Not recalled:" in page.content.decode() and "too late" in page.content.decode()
    assert scheduled_messages_deliver() == 1
    copy = Message.objects.get(topic="TranTest", msg_id="L-1")
    html = operator.get(f"/console/scheduled/{row.pk}/").content.decode()
    assert re.findall(r'data-kind="([a-z]+)"', html) == ["sent", "due", "delivered"]
    assert f'id="delivered-message">TranTest, commit log offset {copy.pk}' in html
    detail = operator.get(f"/console/messages/{copy.pk}/").content.decode()
    assert "delivered here by the timer" in detail
    assert f'href="/console/scheduled/{row.pk}/"' in detail


def test_the_message_search_finds_scheduled_and_recalled_messages(db):
    viewer = client_as("viewer")
    waiting, recalled = schedule("S-1"), schedule("S-2")
    ScheduledMessage.objects.filter(pk=recalled.pk).update(state="RECALLED")

    html = viewer.get("/console/messages/", {"scheduled_state": "RECALLED"}).content.decode()
    rows = re.findall(r'<tr data-commit-log-offset="(\d+)" data-scheduled-state="(\w+)"', html)
    assert rows == [(str(recalled.pk), "RECALLED")]
    assert "scheduled message as sent" in html
    html = viewer.get("/console/messages/", {"scheduled_state": "SCHEDULED"}).content.decode()
    assert re.findall(r'data-scheduled-state="(\w+)"', html) == ["SCHEDULED"]
    detail = viewer.get(f"/console/messages/{waiting.pk}/").content.decode()
    assert "a delay message as stored when sent, for TranTest — now SCHEDULED" in detail
