"""The console's consumer-group pages (console.views.consumer_groups): Olga (a full operator)
resets offsets through preview and apply and resends; Paula operates consumer group
``billing`` only (403 and no controls on ``shipping``); Vic, a viewer, sees no controls."""

from __future__ import annotations

import pytest
from django.test import Client

from broker.models import AuditEntry, Delivery, Message
from broker.services.commitlog.messages import message_send
from broker.services.consumption.dead_letters import dead_letters_run
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import consumer_group_create, topic_create
from console.services import console_user_create
from tests.console.conftest import PASSWORD, signed_in

BASE = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _consume(group: str) -> list:
    out = []
    while batch := messages_receive(
        consumer_group=group, topic="Orders", max_messages=16, invisible_duration_ms=60_000
    ):
        out.extend(batch)
        messages_ack(consumer_group=group, receipt_handles=[r.receipt_handle for r in batch])
    return out


@pytest.fixture
def orders(db):
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="billing")
    consumer_group_create(name="shipping")
    sent = [message_send(topic="Orders", body=f"m{i}".encode()) for i in range(6)]
    for i, m in enumerate(sent):
        Message.objects.filter(pk=m.pk).update(store_timestamp=BASE + i * 1000)
    _consume("billing")
    _consume("shipping")
    return sent


@pytest.fixture
def paula(db) -> Client:
    client = Client()
    client.force_login(
        console_user_create(
            username="paula", role="operator", password=PASSWORD, consumer_groups=["billing"]
        )
    )
    return client


def test_a_reset_is_previewed_with_its_count_then_applied_with_a_reason(client, orders):
    signed_in(client, "operator")
    page = client.get("/console/consumer-groups/billing/")
    assert page.status_code == 200 and b'id="reset-form"' in page.content
    assert (
        client.get("/console/consumer-groups/").content.count(
            b'href="/console/consumer-groups/billing/"'
        )
        == 1
    )

    r = client.post(
        "/console/consumer-groups/billing/offset-resets/", {"at": "2023-11-14T22:13:23"}
    )
    entry = AuditEntry.objects.get(action="reset-offset")
    assert r.url == f"/console/consumer-groups/billing/offset-resets/{entry.pk}/"
    preview = client.get(r.url)
    assert b'<strong id="redeliver-count">3</strong>' in preview.content
    no_reason = client.post(f"{r.url}apply/", {"reason": ""}, follow=True)
    assert b"needs a reason" in no_reason.content
    client.post(f"{r.url}apply/", {"reason": "replay"})
    assert AuditEntry.objects.get(pk=entry.pk).state == "done"
    assert sorted(m.message.pk for m in _consume("billing")) == sorted(m.pk for m in orders[3:])
    assert _consume("shipping") == []


def test_bad_time_is_said_and_changes_nothing(client, orders):
    signed_in(client, "operator")
    r = client.post(
        "/console/consumer-groups/billing/offset-resets/", {"at": "yesterday"}, follow=True
    )
    assert b"YYYY-MM-DD" in r.content
    assert not AuditEntry.objects.exists()


def test_a_resend_from_a_message_reaches_the_group(client, orders):
    signed_in(client, "operator")
    url = f"/console/consumer-groups/billing/resend/{orders[0].pk}/"
    assert b'id="resend-form"' in client.get(url).content
    client.post(url, {"reason": "lost it"})
    assert [r.message.pk for r in _consume("billing")] == [orders[0].pk]
    assert client.get("/console/consumer-groups/billing/resend/999999/").status_code == 404


def test_a_viewer_sees_no_controls(client, orders):
    signed_in(client, "viewer")
    page = client.get("/console/consumer-groups/billing/")
    assert page.status_code == 200
    assert b'id="reset-form"' not in page.content and b"Preview skip" not in page.content
    assert client.post("/console/consumer-groups/billing/skip-backlog/").status_code == 403


def test_a_scoped_operator_acts_on_their_group_only(paula, orders):
    assert b'id="reset-form"' in paula.get("/console/consumer-groups/billing/").content
    other = paula.get("/console/consumer-groups/shipping/")
    assert other.status_code == 200 and b'id="reset-form"' not in other.content
    assert paula.post("/console/consumer-groups/shipping/skip-backlog/").status_code == 403
    assert (
        paula.post(
            "/console/consumer-groups/shipping/offset-resets/", {"at": "2023-11-14T22:13:23"}
        ).status_code
        == 403
    )
    assert paula.get(f"/console/consumer-groups/shipping/resend/{orders[0].pk}/").status_code == 403
    assert paula.post("/console/consumer-groups/billing/skip-backlog/").status_code == 302
    assert not AuditEntry.objects.filter(scope__consumer_group="shipping").exists()


def test_unknown_group_is_404(client, db):
    signed_in(client, "viewer")
    assert client.get("/console/consumer-groups/nope/").status_code == 404


def test_the_audit_log_links_the_operations_to_their_group(client, orders):
    signed_in(client, "operator")
    client.post("/console/consumer-groups/billing/skip-backlog/")
    client.post(f"/console/consumer-groups/billing/resend/{orders[0].pk}/", {"reason": "lost"})
    skip = AuditEntry.objects.get(action="skip-backlog")
    page = client.get("/console/audit/")
    assert page.status_code == 200
    assert f"/console/consumer-groups/billing/offset-resets/{skip.pk}/".encode() in page.content
    assert b"/console/transactions/" not in page.content.split(b"<tbody>")[-1]


def test_a_dead_letter_set_lists_its_dead_letters_by_their_dlq_offset(
    client, orders, django_capture_on_commit_callbacks
):
    consumer_group_create(name="flaky", max_delivery_attempts=1)
    while messages_receive(
        consumer_group="flaky", topic="Orders", max_messages=16, invisible_duration_ms=60_000
    ):
        pass
    Delivery.objects.filter(consumer_group="flaky").update(invisible_until_timestamp=0)
    # Past their one attempt: each moves to %DLQ%flaky.
    assert (
        messages_receive(
            consumer_group="flaky", topic="Orders", max_messages=16, invisible_duration_ms=60_000
        )
        == []
    )
    dead = list(Message.objects.filter(topic="%DLQ%flaky").order_by("commit_log_offset"))
    assert len(dead) == 6
    signed_in(client, "operator")
    client.post("/console/consumer-groups/flaky/dead-letter-resends/", {"scope": "all"})
    entry = AuditEntry.objects.get(action="resend-dead-letters")
    url = f"/console/consumer-groups/flaky/dead-letter-resends/{entry.pk}/"
    page = client.get(url).content.decode()
    cells = [f'<td class="num">{m.commit_log_offset}</td>' for m in dead]
    assert all(cell in page for cell in cells)
    assert page.count('<tr class="result-pending">') == 6
    with django_capture_on_commit_callbacks(execute=False) as queued:
        client.post(f"{url}apply/", {"reason": "consumer fixed"})
    assert len(queued) == 1
    dead_letters_run(entry.pk)  # what the worker's task does
    page = client.get(url).content.decode()
    assert page.count('<tr class="result-done">') == 6
    assert all(cell in page for cell in cells)


def test_the_page_shows_the_groups_subscriptions_and_a_filtered_message_says_so(client, db):
    from broker.services.consumption.subscriptions import subscription_filter

    topic_create(name="Orders", queue_nums=1)
    consumer_group_create(name="billing")
    hot = message_send(topic="Orders", body=b"hot", tags="Hot")
    cold = message_send(topic="Orders", body=b"cold", tags="Cold")
    got = messages_receive(
        consumer_group="billing",
        topic="Orders",
        max_messages=16,
        invisible_duration_ms=60_000,
        filter_expression=subscription_filter(type="TAG", expression="Hot || Warm"),
    )
    assert [r.message.pk for r in got] == [hot.pk]
    signed_in(client, "viewer")

    page = client.get("/console/consumer-groups/billing/").content.decode()

    table = page[page.index('id="subscriptions"') :]
    assert "<td>TAG</td><td><code>Hot || Warm</code></td>" in table[: table.index("</table>")]
    detail = client.get(f"/console/messages/{cold.pk}/").content.decode()
    assert "filtered out by the group&#x27;s subscription" in detail
