"""broker.services.commitlog.storage.message_copy: the one way a stored message is copied to another
topic (commit, discard, resume, dead letter). The copy keeps what the producer sent and gets
its own place in the commit log."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from broker.constants import SYS_FLAG_TRANSACTION_COMMIT_TYPE
from broker.models import Message, Topic
from broker.services.commitlog.storage import message_copy, message_put


def _stored(*, body: bytes = b"\x00\xffbinary", body_is_text: bool = False) -> Message:
    with transaction.atomic():
        return message_put(
            topic="TranTest",
            queue_id=1,
            msg_id="7F0000010001ABCD",
            body=body,
            body_is_text=body_is_text,
            tags="TagA",
            keys="order-42 customer-7",
            properties={"a": "1", "b": "2"},
            producer_group="G",
            born_timestamp=1_700_000_000_000,
        )


def test_a_copy_keeps_what_the_producer_sent_and_gets_its_own_offsets(topic):
    source = _stored()

    with transaction.atomic():
        copy = message_copy(source, topic="TranTest", queue_id=2)

    stored = Message.objects.get(pk=copy.commit_log_offset)
    assert (stored.topic, stored.queue_id, stored.queue_offset) == ("TranTest", 2, 0)
    assert stored.commit_log_offset > source.commit_log_offset
    assert stored.msg_id == source.msg_id
    assert bytes(stored.body) == b"\x00\xffbinary"
    assert stored.body_is_text is False
    assert (stored.tags, stored.keys) == ("TagA", "order-42 customer-7")
    assert stored.producer_group == "G"
    assert stored.born_timestamp == 1_700_000_000_000
    assert stored.store_timestamp >= source.store_timestamp
    assert stored.properties == {"a": "1", "b": "2"}
    assert stored.sys_flag == 0
    assert stored.prepared_transaction_offset is None


def test_a_copy_takes_the_properties_and_flag_it_is_given_and_leaves_the_source_alone(topic):
    source = _stored(body=b"hello", body_is_text=True)

    with transaction.atomic():
        copy = message_copy(
            source,
            topic="TranTest",
            queue_id=0,
            properties={"only": "this"},
            sys_flag=SYS_FLAG_TRANSACTION_COMMIT_TYPE,
            prepared_transaction_offset=source.commit_log_offset,
        )

    stored = Message.objects.get(pk=copy.commit_log_offset)
    assert stored.properties == {"only": "this"}
    assert stored.sys_flag == SYS_FLAG_TRANSACTION_COMMIT_TYPE
    assert stored.prepared_transaction_offset == source.commit_log_offset
    assert (bytes(stored.body), stored.body_is_text) == (b"hello", True)
    assert Message.objects.get(pk=source.commit_log_offset).properties == {"a": "1", "b": "2"}


def test_a_half_message_is_delivered_by_copy_at_most_once(topic):
    source = _stored()
    with transaction.atomic():
        message_copy(source, topic="TranTest", queue_id=0, prepared_transaction_offset=source.pk)

    with pytest.raises(IntegrityError), transaction.atomic():
        message_copy(source, topic="TranTest", queue_id=0, prepared_transaction_offset=source.pk)
    assert Message.objects.filter(prepared_transaction_offset=source.pk).count() == 1


def test_a_copy_to_a_new_broker_topic_creates_it(topic):
    source = _stored()

    with transaction.atomic():
        copy = message_copy(source, topic="%DLQ%C", queue_id=0, system_queue_nums=1)

    assert Topic.objects.get(name="%DLQ%C").system
    assert (copy.topic, copy.queue_offset) == ("%DLQ%C", 0)


def test_a_copy_to_a_missing_user_queue_is_refused(topic):
    source = _stored()

    with pytest.raises(LookupError), transaction.atomic():
        message_copy(source, topic="NoSuchTopic", queue_id=0)
