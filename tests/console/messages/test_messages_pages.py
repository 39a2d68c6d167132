"""``/console/messages/``: the message search and a message's page, for every console role;
invalid searches are the page with the form's errors (400); a message the database no longer
holds is a 404 page that says where pruned messages went."""

from __future__ import annotations

import pytest
from django.test import Client

from broker.models import ArchiveSegment, ArchiveWatermark
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import consumer_group_create
from broker.services.transactions.end import transaction_end
from tests.console.conftest import signed_in
from tests.support import prepare

pytestmark = pytest.mark.usefixtures("topic", "producer_group")


@pytest.fixture
def viewer(db) -> Client:
    client = Client()
    signed_in(client, "viewer")
    return client


def test_a_committed_message_is_found_by_key_and_shows_its_delivery_per_group(viewer):
    consumer_group_create(name="billing", max_delivery_attempts=3)
    consumer_group_create(name="shipping", max_delivery_attempts=3)
    tx = prepare(keys="ORDER-1234", body='{"amount": 12}')
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    got = messages_receive(
        consumer_group="billing", topic="TranTest", max_messages=32, invisible_duration_ms=60_000
    )
    messages_ack(consumer_group="billing", receipt_handles=[r.receipt_handle for r in got])
    messages_receive(  # shipping takes the one message and holds it (no ack)
        consumer_group="shipping", topic="TranTest", max_messages=1, invisible_duration_ms=60_000
    )

    page = viewer.get("/console/messages/", {"key": "ORDER-1234"})

    assert page.status_code == 200
    body = page.content.decode()
    assert "committed transactional message" in body
    assert "half message" in body  # the half message shares its keys
    committed = got[0].message
    detail = viewer.get(f"/console/messages/{committed.commit_log_offset}/").content.decode()
    assert f'href="/console/transactions/{tx.pk}/"' in detail
    assert 'data-consumer-group="billing" data-state="acked"' in detail
    assert 'data-consumer-group="shipping" data-state="in_flight"' in detail
    assert "&quot;amount&quot;: 12" in detail


def test_an_invalid_search_is_a_400_page_with_the_errors(viewer):
    response = viewer.get(
        "/console/messages/", {"topic": "no/such", "start": "2026-11-28T10:00", "end": "bad"}
    )

    assert response.status_code == 400
    assert "topic:" in response.content.decode()
    assert "end:" in response.content.decode()
    assert viewer.get("/console/messages/", {"before": "x"}).status_code == 400


def test_pages_go_older_and_newer(viewer):
    sent = [message_send(topic="TranTest", body=b"x", producer_group="G") for _ in range(3)]

    first = viewer.get("/console/messages/", {"topic": "TranTest", "per_page": 2})
    body = first.content.decode()

    assert f'data-commit-log-offset="{sent[2].pk}"' in body
    assert f'data-commit-log-offset="{sent[0].pk}"' not in body
    assert 'rel="next"' in body and 'rel="prev"' not in body
    older = first.context["older_query"]
    second = viewer.get(f"/console/messages/?{older}&per_page=2").content.decode()
    assert f'data-commit-log-offset="{sent[0].pk}"' in second
    assert 'rel="prev"' in second


def test_a_pruned_message_says_where_it_went(viewer):
    ArchiveWatermark.objects.create(
        name="logs", archived_until_timestamp=3_600_000, pruned_until_timestamp=3_600_000
    )
    ArchiveSegment.objects.create(
        start_timestamp=0, end_timestamp=3_600_000, uri="file:///arch", rows={"commit_log": 3}
    )

    gone = viewer.get("/console/messages/999999/")
    searched = viewer.get("/console/messages/", {"msg_id": "LONGGONE"})

    assert gone.status_code == 404
    assert "file:///arch" in gone.content.decode()
    assert "No message in the database matches" in searched.content.decode()
    assert "file:///arch" in searched.content.decode()


@pytest.mark.parametrize(("role", "status"), [(None, 403), ("viewer", 200), ("operator", 200)])
def test_who_may_search(db, role, status):
    client = Client()
    signed_in(client, role)
    assert client.get("/console/messages/").status_code == status
    assert Client().get("/console/messages/").status_code == 302  # signed out: to sign in


def test_an_operator_of_the_group_gets_a_resend_link(db):
    consumer_group_create(name="billing", max_delivery_attempts=3)
    message = message_send(topic="TranTest", body=b"x", producer_group="G")
    messages_receive(
        consumer_group="billing", topic="TranTest", max_messages=1, invisible_duration_ms=60_000
    )
    operator, viewer = Client(), Client()
    signed_in(operator, "operator")
    signed_in(viewer, "viewer")
    url = f"/console/messages/{message.commit_log_offset}/"
    link = f'href="/console/consumer-groups/billing/resend/{message.commit_log_offset}/"'

    assert link in operator.get(url).content.decode()
    assert link not in viewer.get(url).content.decode()
