"""Topics, producer groups and consumer groups in the console: what a viewer sees, what an
admin changes through the services, and the figures of ``broker.selectors.topology``."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from broker.constants import dlq_topic
from broker.models import ConsumeQueue, ConsumerGroup, Delivery, Message, ProducerGroup, Topic
from broker.selectors.topology import consumer_group_rows, producer_group_rows, topic_rows
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import (
    consumer_group_create,
    producer_group_create,
    topic_create,
)
from tests.support import prepare

CREATE_ROUTES = [
    "console:topic_create",
    "console:producer_group_create",
    "console:consumer_group_create",
]
LIST_ROUTES = ["console:topics", "console:producer_groups", "console:consumer_groups"]


@pytest.fixture
def viewer(console_client):
    return console_client("viewer")


@pytest.fixture
def admin(console_client):
    return console_client("admin")


@pytest.fixture
def topology(db):
    """A topic T (2 queues), producer group P and consumer group C."""
    topic_create(name="T", queue_nums=2)
    producer_group_create(name="P", check_url="http://127.0.0.1:9/check")
    consumer_group_create(name="C")


# --- Who sees what ---------------------------------------------------------------------------


@pytest.mark.parametrize("route", LIST_ROUTES)
def test_viewer_sees_the_lists_without_create_or_edit_links(viewer, topology, route):
    page = viewer.get(reverse(route))
    assert page.status_code == 200
    html = page.content.decode()
    for create in CREATE_ROUTES:
        assert reverse(create) not in html
    assert "/edit/" not in html


@pytest.mark.parametrize("route", LIST_ROUTES)
def test_admin_sees_create_and_edit_links(admin, topology, route):
    html = admin.get(reverse(route)).content.decode()
    assert "/new/" in html and "/edit/" in html


@pytest.mark.parametrize(
    ("route", "args", "data"),
    [
        ("console:topic_create", [], {"name": "New", "queue_nums": 2}),
        ("console:topic_edit", ["T"], {"queue_nums": 4}),
        ("console:producer_group_create", [], {"name": "New", "check_url": ""}),
        ("console:producer_group_edit", ["P"], {"check_url": ""}),
        ("console:consumer_group_create", [], {"name": "New"}),
        ("console:consumer_group_edit", ["C"], {"max_delivery_attempts": 3}),
    ],
)
@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_an_admin_creates_or_edits(console_client, topology, route, args, data, role):
    client = console_client(role)
    url = reverse(route, args=args)
    assert client.get(url).status_code == 403
    assert client.post(url, data).status_code == 403
    assert not Topic.objects.filter(name="New").exists()
    assert Topic.objects.get(name="T").queue_nums == 2
    assert ProducerGroup.objects.get(name="P").check_url == "http://127.0.0.1:9/check"
    assert ConsumerGroup.objects.get(name="C").max_delivery_attempts == 16


def test_anonymous_is_sent_to_sign_in(client, db):
    answer = client.get(reverse("console:topics"))
    assert answer.status_code == 302
    assert answer["Location"].startswith(reverse("console:login"))


# --- Topics ----------------------------------------------------------------------------------


def test_admin_creates_a_topic_with_its_consume_queues(admin):
    answer = admin.post(reverse("console:topic_create"), {"name": "Orders", "queue_nums": 3})
    assert answer.status_code == 302 and answer["Location"] == reverse("console:topics")
    assert Topic.objects.get(name="Orders").queue_nums == 3
    assert sorted(
        ConsumeQueue.objects.filter(topic="Orders").values_list("queue_id", flat=True)
    ) == [0, 1, 2]
    listed = admin.get(reverse("console:topics")).content.decode()
    assert "Orders" in listed and "saved" in listed


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "T", "queue_nums": 1}, "Topic T already exists."),
        ({"name": "bad name", "queue_nums": 1}, "must match"),
        ({"name": "RMQ_SYS_MINE", "queue_nums": 1}, "is a system topic name"),
        ({"name": "Big", "queue_nums": 0}, "queue_nums must be between"),
    ],
)
def test_topic_service_errors_are_form_errors(admin, topology, data, message):
    answer = admin.post(reverse("console:topic_create"), data)
    assert answer.status_code == 400
    assert message in answer.content.decode()
    assert Topic.objects.count() == 1


def test_admin_adds_queues_but_never_removes_them(admin, topology):
    url = reverse("console:topic_edit", args=["T"])
    assert 'value="2"' in admin.get(url).content.decode()
    assert admin.post(url, {"queue_nums": 4}).status_code == 302
    assert ConsumeQueue.objects.filter(topic="T").count() == 4
    fewer = admin.post(url, {"queue_nums": 1})
    assert fewer.status_code == 400
    assert "cannot be removed" in fewer.content.decode()
    assert Topic.objects.get(name="T").queue_nums == 4


def test_admin_sets_a_topics_message_type_and_the_list_shows_it(admin, topology):
    answer = admin.post(
        reverse("console:topic_create"),
        {"name": "Delays", "queue_nums": 1, "message_type": "DELAY"},
    )
    assert answer.status_code == 302
    assert Topic.objects.get(name="Delays").message_type == "DELAY"
    assert Topic.objects.get(name="T").message_type == "MIXED"  # made without a type
    listed = admin.get(reverse("console:topics")).content.decode()
    assert "<td>DELAY</td>" in listed and "<td>MIXED</td>" in listed

    url = reverse("console:topic_edit", args=["Delays"])
    assert '<option value="DELAY" selected>' in admin.get(url).content.decode()
    assert admin.post(url, {"queue_nums": 1, "message_type": "TRANSACTION"}).status_code == 302
    assert Topic.objects.get(name="Delays").message_type == "TRANSACTION"
    assert admin.post(url, {"queue_nums": 2}).status_code == 302  # left out: unchanged
    assert Topic.objects.get(name="Delays").message_type == "TRANSACTION"
    refused = admin.post(url, {"queue_nums": 2, "message_type": "LITE"})
    assert refused.status_code == 400
    assert "Select a valid choice" in refused.content.decode()


def test_system_and_unknown_topics_are_not_editable(admin, topology):
    prepare(producer_group="P", topic="T")  # makes the half topic
    assert Topic.objects.filter(system=True).exists()
    for name in ("RMQ_SYS_TRANS_HALF_TOPIC", "Nope"):
        url = reverse("console:topic_edit", args=[name])
        assert admin.get(url).status_code == 404
        assert admin.post(url, {"queue_nums": 9}).status_code == 404


def test_queue_offsets_min_and_max(viewer, topology):
    sent = [message_send(topic="T", body=f"m{i}".encode()) for i in range(6)]
    stored = {q: sum(1 for m in sent if m.queue_id == q) for q in (0, 1)}
    fuller = max(stored, key=stored.__getitem__)  # at least 3 of the 6
    other = 1 - fuller
    # A commit log trimmed at its head (as RocketMQ deletes expired files): min offset moves.
    Message.objects.filter(topic="T", queue_id=fuller, queue_offset=0).delete()
    [row] = topic_rows()
    offsets = {q.queue_id: (q.min_offset, q.max_offset) for q in row.queues}
    # An empty queue has min = max = 0.
    assert offsets == {fuller: (1, stored[fuller]), other: (0, stored[other])}
    assert row.messages == 5
    html = viewer.get(reverse("console:topics")).content.decode()
    assert f"#{fuller}: 1 … {stored[fuller]}" in html
    assert "RMQ_SYS" not in html


def test_system_topics_on_request(viewer, topology):
    prepare(producer_group="P", topic="T")
    assert (
        "RMQ_SYS_TRANS_HALF_TOPIC"
        in viewer.get(reverse("console:topics") + "?system=1").content.decode()
    )
    assert [r.name for r in topic_rows()] == ["T"]
    assert "RMQ_SYS_TRANS_HALF_TOPIC" in [r.name for r in topic_rows(include_system=True)]


# --- Producer groups -------------------------------------------------------------------------


def test_producer_group_create_shows_the_secret_once(admin, topology):
    answer = admin.post(
        reverse("console:producer_group_create"),
        {"name": "Shop", "check_url": "https://10.0.0.7/check"},
    )
    assert answer.status_code == 200
    group = ProducerGroup.objects.get(name="Shop")
    assert group.check_url == "https://10.0.0.7/check"
    assert len(group.check_secret) == 64
    assert group.check_secret in answer.content.decode()
    assert group.check_secret not in admin.get(reverse("console:producer_groups")).content.decode()
    again = admin.post(reverse("console:producer_group_create"), {"name": "Shop"})
    assert again.status_code == 400
    assert "Producer group Shop already exists." in again.content.decode()


def test_producer_group_reserved_name_and_bad_url_are_form_errors(admin, db):
    reserved = admin.post(reverse("console:producer_group_create"), {"name": "CID_RMQ_SYS_X"})
    assert reserved.status_code == 400 and "reserved" in reserved.content.decode()
    bad_url = admin.post(
        reverse("console:producer_group_create"), {"name": "Shop", "check_url": "not a url"}
    )
    assert bad_url.status_code == 400
    assert not ProducerGroup.objects.exists()


def test_producer_group_page_shows_reachability_backoff_and_pending(viewer, topology):
    prepare(producer_group="P", topic="T")
    prepare(producer_group="P", topic="T")
    ProducerGroup.objects.filter(name="P").update(
        unreachable_since=1_700_000_000_000,
        last_check_error="connect timeout",
        check_failures=4,
        check_backoff_until=1_700_000_060_000,
    )
    [row] = producer_group_rows()
    assert (row.pending, row.discarded) == (2, 0)
    html = viewer.get(reverse("console:producer_groups")).content.decode()
    for text in (
        "http://127.0.0.1:9/check",
        "unreachable",
        "2023-11-14T22:13:20.000Z",
        "connect timeout",
        "4 failed checks",
        "2023-11-14T22:14:20.000Z",
        'group=P">2</a>',
    ):
        assert text in html


def test_producer_group_edit_changes_the_check_url_and_clears_unreachability(admin, topology):
    ProducerGroup.objects.filter(name="P").update(
        unreachable_since=1_700_000_000_000, last_check_error="refused"
    )
    url = reverse("console:producer_group_edit", args=["P"])
    assert "http://127.0.0.1:9/check" in admin.get(url).content.decode()
    assert admin.post(url, {"check_url": ""}).status_code == 302
    group = ProducerGroup.objects.get(name="P")
    assert (group.check_url, group.unreachable_since, group.last_check_error) == (None, None, "")
    assert admin.get(reverse("console:producer_group_edit", args=["Nope"])).status_code == 404


# --- Consumer groups -------------------------------------------------------------------------


def test_consumer_group_create_and_edit(admin, topology):
    assert admin.post(reverse("console:consumer_group_create"), {"name": "D"}).status_code == 302
    assert ConsumerGroup.objects.get(name="D").max_delivery_attempts == 16
    zero = admin.post(
        reverse("console:consumer_group_create"), {"name": "E", "max_delivery_attempts": 0}
    )
    assert zero.status_code == 400 and "at least 1" in zero.content.decode()
    assert not ConsumerGroup.objects.filter(name="E").exists()
    url = reverse("console:consumer_group_edit", args=["D"])
    assert admin.post(url, {"max_delivery_attempts": 3}).status_code == 302
    assert ConsumerGroup.objects.get(name="D").max_delivery_attempts == 3
    assert admin.post(url, {"max_delivery_attempts": 0}).status_code == 400
    assert ConsumerGroup.objects.get(name="D").max_delivery_attempts == 3


def test_consumer_lag_in_flight_and_dead_letters(viewer, topology):
    consumer_group_create(name="Once", max_delivery_attempts=1)
    for i in range(5):
        message_send(topic="T", body=f"m{i}".encode())
    first = messages_receive(
        consumer_group="Once", topic="T", max_messages=2, invisible_duration_ms=10_000
    )
    assert len(first) == 2
    messages_ack(consumer_group="Once", receipt_handles=[first[0].receipt_handle])
    rows = {r.group.name: r for r in consumer_group_rows()}
    once = rows["Once"]
    assert [(t.topic, t.lag) for t in once.lags] == [("T", 3)]
    assert (once.in_flight, once.dlq) == (1, 0)
    assert rows["C"].lags == [] and rows["C"].total_lag == 0

    # The unacked one's invisible time ends: past 1 attempt, the next receive dead-letters it.
    Delivery.objects.filter(consumer_group="Once").update(invisible_until_timestamp=0)
    second = messages_receive(
        consumer_group="Once", topic="T", max_messages=1, invisible_duration_ms=10_000
    )
    assert len(second) == 1 and second[0].message.pk != first[1].message.pk
    assert Message.objects.filter(topic=dlq_topic("Once")).count() == 1
    once = {r.group.name: r for r in consumer_group_rows()}["Once"]
    assert (once.total_lag, once.in_flight, once.dlq) == (2, 1, 1)
    html = viewer.get(reverse("console:consumer_groups")).content.decode()
    assert 'T: <span class="num">2</span>' in html
    assert '<strong class="bad">1</strong>' in html


# --- Query counts ----------------------------------------------------------------------------


def _count(selector, **kwargs) -> int:
    with CaptureQueriesContext(connection) as ctx:
        selector(**kwargs)
    return len(ctx.captured_queries)


def test_query_counts_do_not_grow_with_topics_or_groups(topology):
    message_send(topic="T", body=b"x")
    messages_receive(consumer_group="C", topic="T", max_messages=1, invisible_duration_ms=10_000)
    before = [_count(topic_rows), _count(producer_group_rows), _count(consumer_group_rows)]
    for i in range(6):
        topic_create(name=f"T{i}", queue_nums=3)
        message_send(topic=f"T{i}", body=b"x")
        producer_group_create(name=f"P{i}", check_url=None)
        prepare(producer_group=f"P{i}", topic=f"T{i}")
        consumer_group_create(name=f"C{i}")
        messages_receive(
            consumer_group=f"C{i}", topic=f"T{i}", max_messages=1, invisible_duration_ms=10_000
        )
    assert len(topic_rows()) == 7 and len(consumer_group_rows()) == 7
    after = [_count(topic_rows), _count(producer_group_rows), _count(consumer_group_rows)]
    assert after == before == [2, 2, 4]
