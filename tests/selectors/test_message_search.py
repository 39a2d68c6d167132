"""The message search: every message the database holds, by topic and store time, key, tag, msg
id or transaction id, newest first in keyset pages without gaps or repeats; one message's
standing with each consumer group; and, for what was pruned, the archive's segments."""

from __future__ import annotations

import pytest
from django.db import connection

from broker.constants import HALF_TOPIC, OP_HALF_TOPIC
from broker.models import ArchiveSegment, ArchiveWatermark, ConsumerOffset, Message
from broker.rules.clock import now_ms
from broker.rules.messages import DeliveryState, MessageKind
from broker.selectors.message_search import (
    MessageQuery,
    SearchCursor,
    archive_note,
    message_deliveries,
    message_search_page,
    message_transaction_id,
    messages_search,
)
from broker.services.commitlog.messages import message_send
from broker.services.consumption.receive import messages_ack, messages_receive
from broker.services.topology.writes import consumer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from broker.services.transactions.op_messages import op_flush
from tests.support import prepare

pytestmark = pytest.mark.usefixtures("topic", "producer_group")


def send(keys: str = "", tags: str = "", body: str = "b", topic: str = "TranTest") -> Message:
    return message_send(topic=topic, body=body.encode(), keys=keys, tags=tags, producer_group="G")


def found(**query) -> list[int]:
    return [m.pk for m in messages_search(MessageQuery(**query))]


def test_a_key_is_found_alone_or_among_several_and_never_as_part_of_another():
    alone = send(keys="ORDER-1234")
    among = send(keys="A-1 ORDER-1234 B-2")
    first, last = send(keys="ORDER-1234 Z"), send(keys="Y ORDER-1234")
    send(keys="ORDER-12345")
    send(keys="XORDER-1234 ORDER-123")

    assert sorted(found(key="ORDER-1234")) == sorted(p.pk for p in (alone, among, first, last))


def test_the_key_search_uses_the_key_indexes():
    send(keys="K1")
    sql, params = messages_search(MessageQuery(key="K1")).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "message_keys" in plan, plan
    assert "message_multi_keys" in plan, plan


def test_a_transaction_id_finds_its_half_message_its_committed_copy_and_not_its_op_message():
    tx = prepare(keys="K")
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    op_flush(half_queue_id=tx.half_queue_id, force=True)

    messages = list(messages_search(MessageQuery(msg_id=tx.pk)))

    assert {m.topic for m in messages} == {HALF_TOPIC, "TranTest"}
    committed = next(m for m in messages if m.topic == "TranTest")
    assert message_transaction_id(committed) == tx.pk
    assert message_transaction_id(send()) is None
    ops = Message.objects.filter(topic=OP_HALF_TOPIC)
    assert ops.exists()
    assert not set(ops.values_list("pk", flat=True)) & {m.pk for m in messages}


def test_topic_tag_and_time_range_narrow_the_search():
    early = send(tags="TagA")
    Message.objects.filter(pk=early.pk).update(store_timestamp=1_000)
    a, b = send(tags="TagA"), send(tags="TagB")
    topic_create(name="Other", queue_nums=1)
    send(topic="Other", tags="TagA")

    assert found(topic="TranTest", tag="TagA") == [a.pk, early.pk]
    assert found(topic="TranTest", start_ms=2_000) == [b.pk, a.pk]
    assert found(topic="TranTest", start_ms=0, end_ms=2_000) == [early.pk]
    assert found(producer_groups=frozenset({"someone-else"})) == []


def test_pages_walk_every_message_once_both_ways():
    sent = [send(keys=f"k{i}") for i in range(7)]
    Message.objects.filter(pk__in=[m.pk for m in sent[2:5]]).update(store_timestamp=5_000)
    query = MessageQuery(topic="TranTest")
    expected = found(topic="TranTest")

    seen, before, pages = [], None, []
    while True:
        page = message_search_page(query, before=before, per_page=3)
        pages.append(page)
        seen += [m.pk for m in page.messages]
        if page.next_before is None:
            break
        before = page.next_before
    back = message_search_page(query, after=pages[-1].previous_after, per_page=3)

    assert seen == expected
    assert len(seen) == len(set(seen)) == 7
    assert [m.pk for m in back.messages] == [m.pk for m in pages[-2].messages]
    assert pages[0].previous_after is None
    assert SearchCursor.decode(pages[0].next_before.encode()) == pages[0].next_before
    with pytest.raises(ValueError):
        SearchCursor.decode("12.x")


def test_each_kind_is_named():
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    op_flush(half_queue_id=tx.half_queue_id, force=True)
    send()

    page = message_search_page(MessageQuery(), per_page=10)

    assert {kind for _, kind in page.kinds()} == {
        MessageKind.HALF,
        MessageKind.OP,
        MessageKind.COMMITTED,
        MessageKind.NORMAL,
    }


def test_where_a_message_stands_with_each_consumer_group():
    for group in ("acker", "holder", "waiter", "skipper"):
        consumer_group_create(name=group, max_delivery_attempts=3)
    message = send(keys="K")
    got = {
        group: messages_receive(
            consumer_group=group, topic="TranTest", max_messages=32, invisible_duration_ms=60_000
        )
        for group in ("acker", "holder")
    }
    messages_ack(consumer_group="acker", receipt_handles=[r.receipt_handle for r in got["acker"]])
    where = {"topic": "TranTest", "queue_id": message.queue_id}
    ConsumerOffset.objects.create(consumer_group="waiter", offset=message.queue_offset, **where)
    ConsumerOffset.objects.create(
        consumer_group="skipper", offset=message.queue_offset + 1, **where
    )

    standing = {d.consumer_group: d for d in message_deliveries(message, now=now_ms())}

    assert {g: d.state for g, d in standing.items()} == {
        "acker": DeliveryState.ACKED,
        "holder": DeliveryState.IN_FLIGHT,
        "waiter": DeliveryState.WAITING,
        "skipper": DeliveryState.PASSED,
    }
    assert (standing["acker"].deliveries, standing["acker"].last_event) == (1, "acked")
    assert standing["holder"].invisible_until > now_ms()
    assert standing["waiter"].deliveries == 0
    later = {d.consumer_group: d for d in message_deliveries(message, now=now_ms() + 61_000)}
    assert later["holder"].state == DeliveryState.REDELIVERY_DUE


def test_what_was_pruned_is_said_to_be_in_the_archive(db):
    assert archive_note(MessageQuery()) is None
    ArchiveWatermark.objects.create(
        name="logs", archived_until_timestamp=7_200_000, pruned_until_timestamp=7_200_000
    )
    for start in (0, 3_600_000):
        ArchiveSegment.objects.create(
            start_timestamp=start,
            end_timestamp=start + 3_600_000,
            uri="file:///archive",
            rows={"commit_log": 10},
        )

    whole = archive_note(MessageQuery(msg_id="GONE"))
    second_hour = archive_note(MessageQuery(start_ms=4_000_000, end_ms=9_000_000))

    assert (whole.pruned_until, whole.count) == (7_200_000, 2)
    assert [s.start_timestamp for s in second_hour.segments] == [3_600_000]
    assert archive_note(MessageQuery(start_ms=7_200_000)) is None
    page = message_search_page(MessageQuery(msg_id="GONE"))
    assert page.messages == [] and page.archive.count == 2
