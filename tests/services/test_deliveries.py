"""A consumer's operations on one delivery by its receipt handle (broker.services.consumption.deliveries):
change its invisible duration (RocketMQ 5 ChangeInvisibleDuration) and forward it to the DLQ
(ForwardMessageToDeadLetterQueue). Invisibility is ended through the service's own parameter
(a duration of 0) or by moving ``Delivery.invisible_until_timestamp`` back; the one test of a
real invisible time waits on the message's return with a deadline."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from broker.constants import (
    PROPERTY_DELIVERY_ATTEMPT,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
)
from broker.errors import InvalidInput, NotFound
from broker.models import Delivery, DeliveryEvent, Message
from broker.rules.clock import now_ms
from broker.services.commitlog.messages import message_send
from broker.services.consumption.deliveries import (
    CHANGE_INVISIBLE_DURATION_MS,
    delivery_dead_letter,
    delivery_invisible_change,
)
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import consumer_group_create, topic_create

INVISIBLE = 10_000


@pytest.fixture
def orders(db):
    topic_create(name="Orders", queue_nums=2)
    consumer_group_create(name="C", max_delivery_attempts=3)
    consumer_group_create(name="D", max_delivery_attempts=3)


def _receive(group: str = "C", invisible: int = INVISIBLE) -> list:
    return messages_receive(
        consumer_group=group, topic="Orders", max_messages=32, invisible_duration_ms=invisible
    )


def _received_one(group: str = "C"):
    message = message_send(topic="Orders", body=b"order 42")
    [got] = _receive(group)
    assert got.message.msg_id == message.msg_id
    return got


def _change(handle: str, invisible: int, group: str = "C"):
    return delivery_invisible_change(
        consumer_group=group, receipt_handle=handle, invisible_duration_ms=invisible
    )


def _assert_invalid_handle(exc_info: pytest.ExceptionInfo, handle: str, group: str = "C") -> None:
    assert exc_info.value.code == "invalid_receipt_handle"
    assert exc_info.value.details == {"consumer_group": group, "receipt_handle": handle}


# --- Change invisible duration -------------------------------------------------------------------


def test_a_change_answers_a_new_handle_that_acks_and_the_old_one_fails(orders):
    got = _received_one()
    before = now_ms()

    changed = _change(got.receipt_handle, 60_000)

    assert changed.receipt_handle != got.receipt_handle
    assert changed.message.msg_id == got.message.msg_id
    assert changed.delivery_attempt == 1  # a change is not a delivery
    assert before + 60_000 <= changed.invisible_until_timestamp <= now_ms() + 60_000
    delivery = Delivery.objects.get(consumer_group="C")
    assert (delivery.receipt_handle, delivery.invisible_until_timestamp) == (
        changed.receipt_handle,
        changed.invisible_until_timestamp,
    )
    for call in (
        lambda: _change(got.receipt_handle, 0),
        lambda: delivery_dead_letter(consumer_group="C", receipt_handle=got.receipt_handle),
    ):
        with pytest.raises(NotFound) as exc_info:
            call()
        _assert_invalid_handle(exc_info, got.receipt_handle)
    assert messages_ack(consumer_group="C", receipt_handles=[got.receipt_handle]) == (
        0,
        [{"receipt_handle": got.receipt_handle, "code": "invalid_receipt_handle"}],
    )
    assert messages_ack(consumer_group="C", receipt_handles=[changed.receipt_handle]) == (1, [])
    assert not Delivery.objects.exists()
    # Nothing journalled for the change: one hand-out, one ack.
    assert list(DeliveryEvent.objects.values_list("kind", "delivery_attempt")) == [
        ("delivered", 1),
        ("acked", 1),
    ]


def test_a_duration_of_zero_makes_the_message_visible_at_once_as_the_next_attempt(orders):
    got = _received_one()
    assert _receive() == []  # invisible for 10 s

    changed = _change(got.receipt_handle, 0)

    [again] = _receive()
    assert again.message.msg_id == got.message.msg_id
    assert again.delivery_attempt == 2
    assert again.receipt_handle not in (got.receipt_handle, changed.receipt_handle)
    with pytest.raises(NotFound) as exc_info:
        _change(changed.receipt_handle, 0)  # superseded by the redelivery
    _assert_invalid_handle(exc_info, changed.receipt_handle)


def test_a_longer_duration_keeps_an_expired_message_from_being_delivered_again(orders):
    got = _received_one()
    Delivery.objects.update(invisible_until_timestamp=now_ms() - 1)  # its 10 s are over

    _change(got.receipt_handle, 60_000)

    assert _receive() == []


def test_the_message_comes_back_once_the_new_invisible_time_has_passed(orders):
    got = _received_one()
    changed = _change(got.receipt_handle, 300)
    assert _receive() == []

    deadline = time.monotonic() + 10
    again: list = []
    while not again and time.monotonic() < deadline:
        again = _receive()
        if not again:
            time.sleep(0.02)
    assert [r.message.msg_id for r in again] == [got.message.msg_id]
    assert now_ms() >= changed.invisible_until_timestamp
    assert again[0].delivery_attempt == 2


def test_the_bounds_of_a_new_invisible_duration(orders):
    low, high = CHANGE_INVISIBLE_DURATION_MS
    assert (low, high) == (0, 43_200_000)  # the proxy's GrpcValidator: 0 to 12 h
    handle = _received_one().receipt_handle
    for bad in (low - 1, high + 1):
        with pytest.raises(InvalidInput) as exc_info:
            _change(handle, bad)
        assert list(exc_info.value.details["fields"]) == ["invisible_duration_ms"]
    assert Delivery.objects.get().receipt_handle == handle  # refused: nothing changed
    handle = _change(handle, high).receipt_handle
    assert Delivery.objects.get().invisible_until_timestamp >= now_ms() + high - 60_000
    _change(handle, low)


def test_another_groups_handle_and_an_unknown_group_are_refused(orders):
    got = _received_one("C")
    _receive("D")
    row = Delivery.objects.get(consumer_group="C")

    for call in (
        lambda: _change(got.receipt_handle, 0, group="D"),
        lambda: delivery_dead_letter(consumer_group="D", receipt_handle=got.receipt_handle),
    ):
        with pytest.raises(NotFound) as exc_info:
            call()
        _assert_invalid_handle(exc_info, got.receipt_handle, group="D")
    for call in (
        lambda: _change(got.receipt_handle, 0, group="Nobody"),
        lambda: delivery_dead_letter(consumer_group="Nobody", receipt_handle=got.receipt_handle),
    ):
        with pytest.raises(NotFound) as exc_info:
            call()
        assert exc_info.value.code == "consumer_group_not_found"

    after = Delivery.objects.get(consumer_group="C")
    assert (after.receipt_handle, after.invisible_until_timestamp) == (
        row.receipt_handle,
        row.invisible_until_timestamp,
    )
    assert not Message.objects.filter(topic__startswith="%DLQ%").exists()


# --- Dead letter ---------------------------------------------------------------------------------


def test_a_dead_letter_moves_the_message_to_the_groups_dlq_once_with_its_journal_row(orders):
    got = _received_one()
    _change(got.receipt_handle, 0)
    [again] = _receive()  # attempt 2, below the group's 3

    delivery_dead_letter(consumer_group="C", receipt_handle=again.receipt_handle)

    [dead] = Message.objects.filter(topic="%DLQ%C")
    sent = got.message
    assert (dead.msg_id, bytes(dead.body), dead.queue_id) == (sent.msg_id, b"order 42", 0)
    assert dead.properties[PROPERTY_ORIGIN_MESSAGE_ID] == sent.msg_id
    assert dead.properties[PROPERTY_RETRY_TOPIC] == "Orders"
    assert dead.properties[PROPERTY_DELIVERY_ATTEMPT] == "2"
    assert not Delivery.objects.exists()
    journal = DeliveryEvent.objects.filter(kind=DeliveryEvent.Kind.DEAD_LETTERED)
    assert list(
        journal.values_list("consumer_group", "msg_id", "commit_log_offset", "delivery_attempt")
    ) == [("C", sent.msg_id, sent.commit_log_offset, 2)]

    # The handle is spent: a second dead letter, an ack or a change fail, and nothing moves twice.
    with pytest.raises(NotFound) as exc_info:
        delivery_dead_letter(consumer_group="C", receipt_handle=again.receipt_handle)
    _assert_invalid_handle(exc_info, again.receipt_handle)
    assert messages_ack(consumer_group="C", receipt_handles=[again.receipt_handle])[0] == 0
    assert Message.objects.filter(topic="%DLQ%C").count() == 1
    assert journal.count() == 1
    assert _receive() == []  # never delivered to the group again
    # The dead letter is received from the DLQ like any message.
    [from_dlq] = messages_receive(
        consumer_group="C", topic="%DLQ%C", max_messages=32, invisible_duration_ms=INVISIBLE
    )
    assert from_dlq.message.msg_id == sent.msg_id


def test_a_dead_letter_in_one_group_leaves_the_other_groups_delivery(orders):
    got = _received_one("C")
    [other] = _receive("D")

    delivery_dead_letter(consumer_group="C", receipt_handle=got.receipt_handle)

    assert not Message.objects.filter(topic="%DLQ%D").exists()
    assert messages_ack(consumer_group="D", receipt_handles=[other.receipt_handle]) == (1, [])


# --- Races ---------------------------------------------------------------------------------------


def _in_thread(job):
    """Run ``job`` in a thread with its own connection; returns (thread, result list)."""
    result: list = []

    def run() -> None:
        try:
            result.append(job())
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            result.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def _wait_for_lock_wait(deadline_s: float = 10) -> None:
    """Wait until another session of the test database waits for a row lock."""
    deadline = time.monotonic() + deadline_s
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.01)
    raise AssertionError("no session waited for the lock")


@pytest.mark.django_db(transaction=True)
def test_a_change_racing_a_redelivery_fails_and_the_message_is_handed_out_once(orders):
    got = _received_one()
    Delivery.objects.update(invisible_until_timestamp=now_ms() - 1)

    with transaction.atomic():
        [again] = _receive()  # the redelivery holds the delivery row until this commits
        thread, result = _in_thread(lambda: _change(got.receipt_handle, 60_000))
        _wait_for_lock_wait()
    thread.join(30)

    assert not thread.is_alive()
    [error] = result
    assert isinstance(error, NotFound) and error.code == "invalid_receipt_handle"
    delivery = Delivery.objects.get()
    assert (delivery.receipt_handle, delivery.delivery_attempt) == (again.receipt_handle, 2)


@pytest.mark.django_db(transaction=True)
def test_a_receive_during_a_change_skips_the_message(orders):
    got = _received_one()
    Delivery.objects.update(invisible_until_timestamp=now_ms() - 1)

    with transaction.atomic():
        changed = _change(got.receipt_handle, 60_000)  # holds the delivery row until commit
        thread, result = _in_thread(_receive)
        thread.join(30)
        assert not thread.is_alive()
        assert result == [[]]  # skipped, not waited for, and not handed out

    assert _receive() == []  # invisible for the new 60 s
    assert messages_ack(consumer_group="C", receipt_handles=[changed.receipt_handle]) == (1, [])
