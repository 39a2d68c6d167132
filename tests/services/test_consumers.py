"""SimpleConsumer semantics (api-v1 "Consumers"): broker.services.consumption.receive, and a few through
the API. Invisibility is made to expire by moving ``Delivery.invisible_until_timestamp`` back,
never by sleeping."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from broker.constants import (
    PROPERTY_DELIVERY_ATTEMPT,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
)
from broker.models import Delivery, DeliveryEvent, Message
from broker.rules.clock import now_ms
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import consumer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from tests.support import prepare

INVISIBLE = 10_000


def _send(topic: str, n: int, prefix: str = "m") -> list[Message]:
    return [message_send(topic=topic, body=f"{prefix}{i}".encode()) for i in range(n)]


def _receive(group: str, topic: str, max_messages: int = 32, invisible: int = INVISIBLE):
    return messages_receive(
        consumer_group=group,
        topic=topic,
        max_messages=max_messages,
        invisible_duration_ms=invisible,
    )


def _receive_all(group: str, topic: str) -> list:
    """Receive until a receive answers nothing."""
    out = []
    while batch := _receive(group, topic):
        out.extend(batch)
    return out


def _expire(group: str, msg_ids: list[str] | None = None) -> None:
    """End the invisible time of ``group``'s in-flight deliveries (all, or those messages)."""
    qs = Delivery.objects.filter(consumer_group=group)
    if msg_ids is not None:
        qs = qs.filter(message__msg_id__in=msg_ids)
    qs.update(invisible_until_timestamp=now_ms() - 1)


@pytest.fixture
def orders(db):
    return topic_create(name="Orders", queue_nums=3)


def test_every_consumer_group_sees_every_visible_message(orders):
    consumer_group_create(name="C1")
    consumer_group_create(name="C2")
    sent = _send("Orders", 12)

    got1 = _receive_all("C1", "Orders")
    got2 = _receive_all("C2", "Orders")
    expected = sorted(m.msg_id for m in sent)
    assert sorted(r.message.msg_id for r in got1) == expected
    assert sorted(r.message.msg_id for r in got2) == expected
    assert {r.delivery_attempt for r in got1 + got2} == {1}
    # Acking in one group does not touch the other.
    acked, failed = messages_ack(
        consumer_group="C1", receipt_handles=[r.receipt_handle for r in got1]
    )
    assert (acked, failed) == (12, [])
    assert Delivery.objects.filter(consumer_group="C2").count() == 12


def test_half_messages_are_invisible_until_committed(db, producer_group):
    topic_create(name="TranTest", queue_nums=2)
    consumer_group_create(name="C1")
    committed = prepare(body="yes")
    rolled_back = prepare(body="no")
    prepare(body="pending")

    assert _receive("C1", "TranTest") == []
    transaction_end(transaction_id=committed.transaction_id, producer_group="G", action="commit")
    transaction_end(
        transaction_id=rolled_back.transaction_id, producer_group="G", action="rollback"
    )
    got = _receive_all("C1", "TranTest")
    assert [(r.message.msg_id, bytes(r.message.body)) for r in got] == [
        (committed.transaction_id, b"yes")
    ]


@pytest.mark.django_db(transaction=True)
def test_concurrent_receivers_of_one_group_never_get_the_same_message():
    topic_create(name="Orders", queue_nums=4)
    consumer_group_create(name="C1")
    sent = _send("Orders", 200)
    receivers = 6
    got: list[list[str]] = [[] for _ in range(receivers)]
    start = threading.Barrier(receivers)
    errors: list[BaseException] = []

    def receive(i: int) -> None:
        try:
            start.wait()
            empty = 0
            while empty < 3:
                batch = _receive("C1", "Orders", max_messages=5)
                empty = 0 if batch else empty + 1
                got[i].extend(r.message.msg_id for r in batch)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=receive, args=(i,)) for i in range(receivers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    everything = [m for part in got for m in part]
    assert len(everything) == len(set(everything)), "a message went to two receivers"
    # Anything left (receivers gave up on locked queues) is still there for the group, once.
    everything += [r.message.msg_id for r in _receive_all("C1", "Orders")]
    assert sorted(everything) == sorted(m.msg_id for m in sent)
    assert Delivery.objects.filter(consumer_group="C1").count() == 200
    assert set(Delivery.objects.values_list("delivery_attempt", flat=True)) == {1}

    # None acked: once invisible time ends, concurrent receivers get each one again, once.
    _expire("C1")
    got = [[] for _ in range(receivers)]
    threads = [threading.Thread(target=receive, args=(i,)) for i in range(receivers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    everything = [m for part in got for m in part]
    assert len(everything) == len(set(everything)), "a redelivery went to two receivers"
    everything += [r.message.msg_id for r in _receive_all("C1", "Orders")]
    assert sorted(everything) == sorted(m.msg_id for m in sent)
    assert set(Delivery.objects.values_list("delivery_attempt", flat=True)) == {2}


def test_not_acked_is_delivered_again_with_a_new_handle(orders):
    consumer_group_create(name="C1", max_delivery_attempts=5)
    [sent] = _send("Orders", 1)

    [first] = _receive("C1", "Orders")
    assert (first.message.msg_id, first.delivery_attempt) == (sent.msg_id, 1)
    assert _receive("C1", "Orders") == []  # invisible to the group meanwhile

    _expire("C1")
    [second] = _receive("C1", "Orders")
    assert (second.message.msg_id, second.delivery_attempt) == (sent.msg_id, 2)
    assert second.receipt_handle != first.receipt_handle
    assert _receive("C1", "Orders") == []

    acked, failed = messages_ack(consumer_group="C1", receipt_handles=[first.receipt_handle])
    assert acked == 0
    assert failed == [{"receipt_handle": first.receipt_handle, "code": "invalid_receipt_handle"}]
    acked, failed = messages_ack(consumer_group="C1", receipt_handles=[second.receipt_handle])
    assert (acked, failed) == (1, [])

    # Acked: never delivered again, even after the invisible time would have ended.
    _expire("C1")
    assert _receive("C1", "Orders") == []
    assert Delivery.objects.filter(consumer_group="C1").count() == 0


def test_visible_again_only_after_the_invisible_duration(orders):
    consumer_group_create(name="C1")
    _send("Orders", 1)
    [first] = _receive("C1", "Orders", invisible=INVISIBLE)
    delivery = Delivery.objects.get(receipt_handle=first.receipt_handle)
    assert INVISIBLE - 2000 <= delivery.invisible_until_timestamp - now_ms() <= INVISIBLE
    Delivery.objects.filter(pk=delivery.pk).update(invisible_until_timestamp=now_ms() + 60_000)
    assert _receive("C1", "Orders") == []


def test_past_max_delivery_attempts_it_moves_to_the_dlq(orders):
    consumer_group_create(name="C1", max_delivery_attempts=3)
    consumer_group_create(name="C2", max_delivery_attempts=3)
    [sent] = _send("Orders", 1)

    handles = []
    for attempt in (1, 2, 3):
        [r] = _receive("C1", "Orders")
        assert (r.message.msg_id, r.delivery_attempt) == (sent.msg_id, attempt)
        handles.append(r.receipt_handle)
        _expire("C1")
    assert _receive("C1", "Orders") == []  # the 4th attempt goes to the DLQ instead

    [dead] = Message.objects.filter(topic="%DLQ%C1")
    assert dead.msg_id == sent.msg_id
    assert bytes(dead.body) == bytes(sent.body)
    assert dead.properties[PROPERTY_ORIGIN_MESSAGE_ID] == sent.msg_id
    assert dead.properties[PROPERTY_RETRY_TOPIC] == "Orders"
    assert dead.properties[PROPERTY_DELIVERY_ATTEMPT] == "3"
    assert Delivery.objects.filter(consumer_group="C1").count() == 0
    _expire("C1")
    assert _receive("C1", "Orders") == []
    acked, failed = messages_ack(consumer_group="C1", receipt_handles=handles[-1:])
    assert acked == 0 and len(failed) == 1

    # Another group is unaffected and may still consume it.
    [other] = _receive("C2", "Orders")
    assert other.message.msg_id == sent.msg_id
    assert not Message.objects.filter(topic="%DLQ%C2").exists()


def test_ordering_within_a_queue_by_queue_offset(db):
    topic_create(name="Fifo", queue_nums=1)
    consumer_group_create(name="C1")
    sent = _send("Fifo", 10)
    assert [m.queue_offset for m in sent] == list(range(10))

    offsets = []
    bodies = []
    while batch := _receive("C1", "Fifo", max_messages=3):
        offsets.extend(r.message.queue_offset for r in batch)
        bodies.extend(bytes(r.message.body).decode() for r in batch)
    assert offsets == list(range(10))
    assert bodies == [f"m{i}" for i in range(10)]


def test_messages_sent_later_are_received_later(orders):
    consumer_group_create(name="C1")
    first = _send("Orders", 3, prefix="a")
    got = _receive_all("C1", "Orders")
    assert sorted(r.message.msg_id for r in got) == sorted(m.msg_id for m in first)
    second = _send("Orders", 3, prefix="b")
    got = _receive_all("C1", "Orders")
    assert sorted(r.message.msg_id for r in got) == sorted(m.msg_id for m in second)


def test_a_receive_takes_from_every_queue_in_one_statement(orders):
    """Orders has 3 queues. On PostgreSQL a receive, idle or not, is four statements: BEGIN,
    the group's expired deliveries, ONE statement that locks the offsets, reads every queue's
    messages, inserts the deliveries and their journal rows and advances the offsets, COMMIT
    (here a savepoint and its release: the test runs in a transaction). The group's first
    receive of the topic also creates its offsets, then runs that statement again."""
    consumer_group_create(name="C1")
    assert _receive("C1", "Orders") == []

    def statements() -> tuple[list, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            got = _receive("C1", "Orders")
        return got, [q["sql"].split()[0] for q in queries.captured_queries]

    shape = ["SAVEPOINT", "SELECT", "WITH", "RELEASE"]
    assert statements() == ([], shape)
    sent = [message_send(topic="Orders", body=f"m{i}".encode()) for i in range(5)]
    got, shape_with_messages = statements()
    assert sorted(r.message.msg_id for r in got) == sorted(m.msg_id for m in sent)
    assert shape_with_messages == shape
    assert statements() == ([], shape)
    assert DeliveryEvent.objects.filter(consumer_group="C1", kind="delivered").count() == 5


def test_an_ack_deletes_and_journals_in_one_statement(orders):
    """On PostgreSQL an ack is one statement (here inside a savepoint: the test runs in a
    transaction): the deliveries deleted, each journalled as acked; an unknown handle fails."""
    consumer_group_create(name="C1")
    message_send(topic="Orders", body=b"x")
    [got] = _receive("C1", "Orders")

    with CaptureQueriesContext(connection) as queries:
        acked, failed = messages_ack(
            consumer_group="C1", receipt_handles=[got.receipt_handle, "no-such-handle"]
        )

    assert (acked, failed) == (
        1,
        [{"receipt_handle": "no-such-handle", "code": "invalid_receipt_handle"}],
    )
    assert [q["sql"].split()[0] for q in queries.captured_queries] == [
        "SAVEPOINT",
        "WITH",
        "RELEASE",
    ]
    assert not Delivery.objects.filter(consumer_group="C1").exists()
    event = DeliveryEvent.objects.get(consumer_group="C1", kind="acked")
    assert (event.msg_id, event.delivery_attempt) == (got.message.msg_id, 1)


# --- Through the API --------------------------------------------------------------------------


def test_receive_and_ack_through_the_api(db, consumer, consumer_group):
    topic_create(name="Orders", queue_nums=2)
    sent = _send("Orders", 3)

    response = consumer.post(
        "/api/v1/consumer-groups/C/receive",
        {"topic": "Orders", "max_messages": 32, "invisible_duration_ms": 10_000},
        format="json",
    )
    assert response.status_code == 200, response.content
    messages = response.json()["messages"]
    assert sorted(m["msg_id"] for m in messages) == sorted(m.msg_id for m in sent)
    for m in messages:
        assert m["delivery_attempt"] == 1
        assert m["body"].startswith("m")
        assert {
            "queue_id",
            "queue_offset",
            "receipt_handle",
            "born_timestamp",
            "store_timestamp",
        } <= set(m)

    first = messages[0]
    _expire("C", [first["msg_id"]])
    again = consumer.post(
        "/api/v1/consumer-groups/C/receive", {"topic": "Orders"}, format="json"
    ).json()["messages"]
    assert [(m["msg_id"], m["delivery_attempt"]) for m in again] == [(first["msg_id"], 2)]

    handles = [m["receipt_handle"] for m in messages]
    response = consumer.post(
        "/api/v1/consumer-groups/C/ack",
        {"receipt_handles": [*handles, again[0]["receipt_handle"]]},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "acked": 3,
        "failed": [{"receipt_handle": first["receipt_handle"], "code": "invalid_receipt_handle"}],
    }
    _expire("C")
    empty = consumer.post("/api/v1/consumer-groups/C/receive", {"topic": "Orders"}, format="json")
    assert empty.json() == {"messages": []}


def test_receive_bounds_through_the_api(db, consumer, consumer_group):
    topic_create(name="Orders", queue_nums=1)
    for body in (
        {"topic": "Orders", "invisible_duration_ms": 9_999},
        {"topic": "Orders", "max_messages": 33},
        {"topic": "Orders", "max_messages": 0},
        {"topic": "Orders", "wait_ms": 30_001},
    ):
        response = consumer.post("/api/v1/consumer-groups/C/receive", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["error"]["code"] == "invalid_input"


@pytest.mark.django_db(transaction=True)
def test_long_poll_receive_returns_when_a_message_arrives(consumer, consumer_group):
    topic_create(name="Orders", queue_nums=2)
    result: dict = {}

    def receive():
        try:
            response = consumer.post(
                "/api/v1/consumer-groups/C/receive",
                {"topic": "Orders", "wait_ms": 20_000},
                format="json",
            )
            result["status"] = response.status_code
            result["messages"] = response.json()["messages"]
        finally:
            connection.close()

    thread = threading.Thread(target=receive)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()
    [sent] = _send("Orders", 1)
    thread.join(15)
    assert not thread.is_alive(), "the long poll did not return when a message arrived"
    assert result["status"] == 200
    assert [m["msg_id"] for m in result["messages"]] == [sent.msg_id]


@pytest.mark.django_db(transaction=True)
def test_a_receive_in_one_group_does_not_hold_up_redelivery_in_another():
    """Groups are independent: while a receiver of C1 is redelivering a message, a receiver of
    C2 still gets its own expired delivery of that same message."""
    topic_create(name="Orders", queue_nums=1)
    consumer_group_create(name="C1")
    consumer_group_create(name="C2")
    [sent] = _send("Orders", 1)
    assert len(_receive("C1", "Orders")) == 1
    assert len(_receive("C2", "Orders")) == 1
    _expire("C1")
    _expire("C2")

    taken = threading.Event()
    finish = threading.Event()
    c1: list = []

    def c1_receiver_in_the_middle_of_its_receive() -> None:
        try:
            with transaction.atomic():  # keeps the receive's row locks until finish is set
                c1.extend(_receive("C1", "Orders"))
                taken.set()
                finish.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=c1_receiver_in_the_middle_of_its_receive)
    thread.start()
    try:
        assert taken.wait(10)
        c2 = _receive("C2", "Orders")
    finally:
        finish.set()
        thread.join(10)
    assert [(r.message.msg_id, r.delivery_attempt) for r in c1] == [(sent.msg_id, 2)]
    assert [(r.message.msg_id, r.delivery_attempt) for r in c2] == [(sent.msg_id, 2)]
