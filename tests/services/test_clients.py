"""The RocketMQ clients seen over gRPC (broker/services/topology/clients.py): rows written by settings,
heartbeats and disconnections, and the producer group a gRPC caller sends as."""

from __future__ import annotations

import pytest

from broker.errors import Forbidden, NotFound
from broker.models import ClientConnection, ProducerGroup
from broker.services.access.callers import ANONYMOUS, caller_of_key
from broker.services.topology.clients import (
    client_disconnect,
    client_heartbeat,
    client_producer_groups,
    client_publishing_add,
    client_settings_record,
    grpc_producer_group_of,
    grpc_producer_group_resolve,
    grpc_sender_group,
)
from broker.services.topology.writes import access_key_create, producer_group_create, topic_create

pytestmark = pytest.mark.django_db


def record(
    client_id: str = "c1", now: int = 1_000, server: str = "s1", **fields
) -> ClientConnection:
    return client_settings_record(
        client_id=client_id, kind="PRODUCER", server=server, now=now, **fields
    )


def test_settings_create_then_keep_the_connection_time():
    record(now=1_000, producer_groups=["G"], topics=["t"])
    row = record(now=5_000, producer_groups=["G"], topics=["t"])
    assert (row.connected_timestamp, row.last_heartbeat_timestamp) == (1_000, 5_000)
    assert ClientConnection.objects.count() == 1


def test_settings_after_a_disconnection_connect_again():
    record(now=1_000)
    assert client_disconnect(client_id="c1", now=2_000)
    row = record(now=3_000, server="s2")
    assert (row.connected_timestamp, row.disconnected_timestamp, row.server) == (3_000, None, "s2")


def test_a_stream_ending_on_another_server_leaves_the_row_connected():
    record(server="s2")
    assert not client_disconnect(client_id="c1", server="s1")
    assert client_disconnect(client_id="c1", server="s2")
    assert not client_disconnect(client_id="c1")  # already disconnected


def test_a_heartbeat_touches_the_row_or_creates_one_without_a_server():
    client_heartbeat(client_id="new", kind="SIMPLE_CONSUMER", consumer_group="C", now=7)
    row = ClientConnection.objects.get(pk="new")
    assert (row.server, row.consumer_group, row.last_heartbeat_timestamp) == ("", "C", 7)
    record(client_id="new", now=8)
    client_heartbeat(client_id="new", kind="PRODUCER", now=9)
    row.refresh_from_db()
    assert (row.last_heartbeat_timestamp, row.server) == (9, "s1")


def test_a_heartbeat_does_not_reconnect():
    record(now=1)
    client_disconnect(client_id="c1", now=2)
    client_heartbeat(client_id="c1", kind="PRODUCER", now=3)
    assert ClientConnection.objects.get(pk="c1").disconnected_timestamp == 2


def test_publishing_add_notes_a_new_group_and_topic_once():
    record(producer_groups=["G"], topics=["t"])
    client_publishing_add(client_id="c1", producer_group="H", topic="u")
    client_publishing_add(client_id="c1", producer_group="H", topic="u")
    client_publishing_add(client_id="unknown", producer_group="H", topic="u")
    row = ClientConnection.objects.get(pk="c1")
    assert (row.producer_groups, row.topics) == (["G", "H"], ["t", "u"])
    assert not ClientConnection.objects.filter(pk="unknown").exists()


def test_the_group_named_after_the_topic_is_created_on_first_use():
    topic_create(name="orders", queue_nums=1)
    assert grpc_producer_group_resolve(caller=ANONYMOUS, topic="orders") == "orders"
    assert grpc_producer_group_resolve(caller=ANONYMOUS, topic="orders") == "orders"
    group = ProducerGroup.objects.get(name="orders")
    assert group.check_url is None


def test_no_group_is_created_for_an_unknown_topic():
    with pytest.raises(NotFound):
        grpc_producer_group_resolve(caller=ANONYMOUS, topic="nope")
    assert not ProducerGroup.objects.filter(name="nope").exists()


def test_a_key_with_one_group_sends_as_it():
    topic_create(name="orders", queue_nums=1)
    producer_group_create(name="G", check_url=None)
    key, _ = access_key_create(name="producer", producer_groups=["G"])
    caller = caller_of_key(key)
    assert grpc_producer_group_resolve(caller=caller, topic="orders") == "G"
    assert grpc_sender_group(caller=caller, topic="orders") == "G"
    assert client_producer_groups(caller=caller, topics=["orders", "x"]) == ["G"]


def test_a_key_without_the_topics_group_is_forbidden():
    topic_create(name="orders", queue_nums=1)
    key, _ = access_key_create(name="two", producer_groups=["G", "H"])
    caller = caller_of_key(key)
    with pytest.raises(Forbidden):
        grpc_producer_group_resolve(caller=caller, topic="orders")
    with pytest.raises(Forbidden):
        grpc_producer_group_of(caller=caller, topic="orders")
    assert grpc_sender_group(caller=caller, topic="orders") == ""
    assert not ProducerGroup.objects.filter(name="orders").exists()


def test_an_admin_key_sends_as_the_topics_group():
    key, _ = access_key_create(name="owner", is_admin=True)
    assert grpc_producer_group_of(caller=caller_of_key(key), topic="orders") == "orders"
    assert client_producer_groups(caller=caller_of_key(key), topics=["b", "a", "b"]) == ["a", "b"]
