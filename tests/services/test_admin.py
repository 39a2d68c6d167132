"""Operators' writes (broker/services/topology/writes.py) beyond what the API tests cover: growing a
topic, changing a consumer group or an access key, and the queue_nums bound at its edges."""

from __future__ import annotations

import pytest

from broker.errors import InvalidInput, NotFound
from broker.lookups import access_key_by_hash, consumer_group_by_name, topic_by_name
from broker.models import ConsumeQueue, Topic
from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN
from broker.services.commitlog.storage import system_topic_ensure
from broker.services.topology.writes import (
    access_key_create,
    access_key_update,
    consumer_group_create,
    consumer_group_update,
    token_hash,
    topic_create,
    topic_update,
)


def queue_ids(topic: str) -> list[int]:
    return sorted(ConsumeQueue.objects.filter(topic=topic).values_list("queue_id", flat=True))


@pytest.mark.django_db
@pytest.mark.parametrize("queue_nums", [QUEUE_NUMS_MIN, QUEUE_NUMS_MAX])
def test_a_topic_may_have_from_one_to_1024_queues(queue_nums):
    topic_create(name="Edge", queue_nums=queue_nums)

    assert queue_ids("Edge") == list(range(queue_nums))


@pytest.mark.django_db
@pytest.mark.parametrize("queue_nums", [QUEUE_NUMS_MIN - 1, QUEUE_NUMS_MAX + 1])
def test_a_topic_outside_the_queue_bound_is_refused(queue_nums):
    with pytest.raises(InvalidInput) as caught:
        topic_create(name="Edge", queue_nums=queue_nums)

    assert caught.value.code == "invalid_queue_nums"
    assert not Topic.objects.exists() and not ConsumeQueue.objects.exists()


@pytest.mark.django_db
def test_growing_a_topic_adds_its_new_consume_queues_and_keeps_the_old_ones():
    topic_create(name="T", queue_nums=2)
    ConsumeQueue.objects.filter(topic="T", queue_id=1).update(max_offset=7)
    assert topic_by_name("T").queue_nums == 2  # cached in this process

    topic = topic_update(name="T", queue_nums=4)

    assert topic.queue_nums == 4
    assert queue_ids("T") == [0, 1, 2, 3]
    assert ConsumeQueue.objects.get(topic="T", queue_id=1).max_offset == 7
    assert topic_by_name("T").queue_nums == 4  # the cached topic was forgotten


@pytest.mark.django_db
def test_the_same_queue_nums_changes_nothing():
    topic_create(name="T", queue_nums=3)

    assert topic_update(name="T", queue_nums=3).queue_nums == 3
    assert queue_ids("T") == [0, 1, 2]


@pytest.mark.django_db
@pytest.mark.parametrize("queue_nums", [1, QUEUE_NUMS_MAX + 1])
def test_a_topic_neither_loses_queues_nor_passes_the_bound(queue_nums):
    topic_create(name="T", queue_nums=3)

    with pytest.raises(InvalidInput) as caught:
        topic_update(name="T", queue_nums=queue_nums)

    assert caught.value.code == "invalid_queue_nums"
    assert Topic.objects.get(name="T").queue_nums == 3 and queue_ids("T") == [0, 1, 2]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["Nowhere", "RMQ_SYS_TRANS_HALF_TOPIC"])
def test_only_an_existing_user_topic_is_grown(name):
    system_topic_ensure("RMQ_SYS_TRANS_HALF_TOPIC", 1)

    with pytest.raises(NotFound) as caught:
        topic_update(name=name, queue_nums=8)

    assert caught.value.code == "topic_not_found"
    assert Topic.objects.get(name="RMQ_SYS_TRANS_HALF_TOPIC").queue_nums == 1


@pytest.mark.django_db
def test_a_consumer_group_changes_its_attempts_but_never_below_one():
    consumer_group_create(name="C", max_delivery_attempts=3)

    assert consumer_group_update(name="C", max_delivery_attempts=9).max_delivery_attempts == 9
    with pytest.raises(InvalidInput):
        consumer_group_update(name="C", max_delivery_attempts=0)
    with pytest.raises(NotFound) as caught:
        consumer_group_update(name="D", max_delivery_attempts=2)
    assert caught.value.code == "consumer_group_not_found"


@pytest.mark.django_db
def test_a_receive_sees_a_consumer_groups_new_attempts_at_once_in_the_changing_process():
    """Receives read the group through the lookup cache; an update (a queryset update, no
    post_save) forgets the cached group in its own process."""
    consumer_group_create(name="C", max_delivery_attempts=3)
    assert consumer_group_by_name("C").max_delivery_attempts == 3  # now cached

    consumer_group_update(name="C", max_delivery_attempts=9)

    assert consumer_group_by_name("C").max_delivery_attempts == 9
    assert consumer_group_by_name("D") is None


@pytest.mark.django_db
def test_an_access_key_changes_its_rights_and_keeps_its_token():
    key, token = access_key_create(name="app", producer_groups=["G"])
    assert access_key_by_hash(token_hash(token)).producer_groups == ["G"]  # now cached

    changed = access_key_update(
        name="app", is_admin=True, producer_groups=["H", "H"], consumer_groups=["C"]
    )

    assert (changed.is_admin, changed.producer_groups, changed.consumer_groups) == (
        True,
        ["H"],
        ["C"],
    )
    assert changed.token_hash == key.token_hash
    assert access_key_by_hash(token_hash(token)).is_admin  # the cached key was forgotten


@pytest.mark.django_db
def test_an_access_key_update_checks_names_and_existence():
    access_key_create(name="app")

    with pytest.raises(InvalidInput):
        access_key_update(name="app", is_admin=False, producer_groups=["a b"], consumer_groups=[])
    with pytest.raises(NotFound) as caught:
        access_key_update(name="other", is_admin=False, producer_groups=[], consumer_groups=[])
    assert caught.value.code == "access_key_not_found"
