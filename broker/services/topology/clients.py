"""RocketMQ 5 clients seen over gRPC (``ClientConnection``): what their telemetry settings, heartbeats
and terminations write (RocketMQ proxy ``ClientActivity``: ``ProducerManager`` /
``ConsumerManager`` channels), and which producer group a gRPC caller sends as.

A row is keyed by the client's ``x-mq-client-id``. Its telemetry settings (re)connect it and
name the gRPC server process holding its stream (``server``), where back-checks are written;
heartbeats keep it live; the end of that stream or a NotifyClientTermination disconnects it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from django.db import IntegrityError, transaction

from broker.errors import Conflict, Forbidden
from broker.lookups import producer_group_exists
from broker.models import ClientConnection
from broker.rules.clock import now_ms
from broker.rules.producer_groups import grpc_producer_group
from broker.services.access.callers import Caller
from broker.services.commitlog.messages import producer_topic_get
from broker.services.topology.writes import producer_group_create


def client_producer_groups(*, caller: Caller, topics: Iterable[str]) -> list[str]:
    """The producer groups a client publishing ``topics`` sends as
    (``grpc_producer_group`` for each topic and the caller's key), sorted, once each."""
    key_groups = caller.key_producer_groups()
    return sorted({grpc_producer_group(topic=t, key_producer_groups=key_groups) for t in topics})


def client_settings_record(
    *,
    client_id: str,
    kind: str,
    language: str = "",
    version: str = "",
    host: str = "",
    access_key: str = "",
    producer_groups: list[str] | None = None,
    consumer_group: str = "",
    topics: list[str] | None = None,
    server: str = "",
    now: int | None = None,
) -> ClientConnection:
    """Record the settings a client sent on its telemetry stream held by gRPC server process
    ``server`` (``broker.plumbing.telemetry_bus.telemetry_server_id``): the row is created, or
    updated and connected again (``disconnected_timestamp`` cleared), its last heartbeat now
    (``now``, ms). ``connected_timestamp`` is kept while the client stays connected (settings
    are sent again every 5 minutes), else set to now.

    Args:
        kind: a ``ClientConnection.Kind`` value.
        producer_groups: a producer's groups (``client_producer_groups``); topics: a producer's
            publishing topics or a consumer's subscribed topics.
    """
    now = now if now is not None else now_ms()
    fields = {
        "kind": kind,
        "language": language[:32],
        "version": version[:64],
        "host": host[:255],
        "access_key": access_key,
        "producer_groups": sorted(set(producer_groups or [])),
        "consumer_group": consumer_group,
        "topics": sorted(set(topics or [])),
        "server": server,
        "last_heartbeat_timestamp": now,
        "disconnected_timestamp": None,
    }
    with transaction.atomic():
        row = ClientConnection.objects.select_for_update().filter(pk=client_id).first()
        if row is None:
            try:
                with transaction.atomic():
                    return ClientConnection.objects.create(
                        client_id=client_id, connected_timestamp=now, **fields
                    )
            except IntegrityError:  # created meanwhile by a heartbeat: update it
                row = ClientConnection.objects.select_for_update().get(pk=client_id)
        if row.disconnected_timestamp is not None:
            row.connected_timestamp = now
        for name, value in fields.items():
            setattr(row, name, value)
        row.save()
    return row


def client_heartbeat(
    *,
    client_id: str,
    kind: str,
    consumer_group: str = "",
    language: str = "",
    version: str = "",
    host: str = "",
    access_key: str = "",
    now: int | None = None,
) -> None:
    """A client's heartbeat (every 10 s): its row's ``last_heartbeat_timestamp`` becomes now
    (ms), and a consumer's group is noted. A client not seen before (no telemetry settings yet)
    gets a row without a ``server``: no back-check can reach it until its settings arrive. A
    disconnected row stays disconnected: only new settings on a stream connect it again.
    """
    now = now if now is not None else now_ms()
    changes: dict[str, object] = {"last_heartbeat_timestamp": now}
    if consumer_group:
        changes["consumer_group"] = consumer_group
    if ClientConnection.objects.filter(pk=client_id).update(**changes):
        return
    try:
        with transaction.atomic():
            ClientConnection.objects.create(
                client_id=client_id,
                kind=kind,
                consumer_group=consumer_group,
                language=language[:32],
                version=version[:64],
                host=host[:255],
                access_key=access_key,
                connected_timestamp=now,
                last_heartbeat_timestamp=now,
            )
    except IntegrityError:  # its settings arrived meanwhile
        ClientConnection.objects.filter(pk=client_id).update(**changes)


def client_disconnect(*, client_id: str, server: str | None = None, now: int | None = None) -> bool:
    """Mark a client disconnected at ``now`` (ms): its telemetry stream on gRPC server process
    ``server`` ended (a row whose stream is now held by another process is left alone), or,
    ``server`` None, it said it terminates (NotifyClientTermination). Returns whether a
    connected row changed."""
    now = now if now is not None else now_ms()
    rows = ClientConnection.objects.filter(pk=client_id, disconnected_timestamp__isnull=True)
    if server is not None:
        rows = rows.filter(server=server)
    return rows.update(disconnected_timestamp=now) > 0


def client_publishing_add(*, client_id: str, producer_group: str, topic: str) -> None:
    """Note that client ``client_id`` sends as ``producer_group`` to ``topic`` (a topic its
    settings did not name), so back-checks of its half messages find it. Nothing when the
    client has no row yet or already lists both."""
    with transaction.atomic():
        row = ClientConnection.objects.select_for_update().filter(pk=client_id).first()
        if row is None:
            return
        if producer_group in row.producer_groups and topic in row.topics:
            return
        row.producer_groups = sorted({*row.producer_groups, producer_group})
        row.topics = sorted({*row.topics, topic})
        row.save(update_fields=["producer_groups", "topics"])


def grpc_producer_group_of(*, caller: Caller, topic: str) -> str:
    """The producer group of the caller's transactions on ``topic`` (the group their half
    messages were sent as, ``grpc_producer_group``), for ending them.

    Raises:
        Forbidden: ``permission_denied`` when the caller's key may not act for the group.
    """
    group = grpc_producer_group(topic=topic, key_producer_groups=caller.key_producer_groups())
    if not caller.may_produce(group):
        raise Forbidden(
            f"This access key may not act for producer group {group}.",
            details={"producer_group": group},
        )
    return group


def grpc_producer_group_resolve(*, caller: Caller, topic: str) -> str:
    """The producer group a gRPC half message to ``topic`` belongs to
    (``broker.rules.producer_groups.grpc_producer_group``), created on first use (without
    ``check_url``: its back-checks go over telemetry) when it does not exist.

    Raises:
        Forbidden: ``system_topic``; ``permission_denied`` when the caller's key may not act for
            the group.
        NotFound: ``topic_not_found`` (checked before a group is created).
    """
    group = grpc_producer_group_of(caller=caller, topic=topic)
    if not producer_group_exists(group):
        producer_topic_get(topic)
        with contextlib.suppress(Conflict):  # created meanwhile by another call
            producer_group_create(name=group, check_url=None)
    return group


def grpc_sender_group(*, caller: Caller, topic: str) -> str:
    """The producer group a normal message sent over gRPC to ``topic`` is stored with: the
    group ``grpc_producer_group`` names when it exists and the caller may act for it, else ""
    (no sender group, as an HTTP send naming none). Never creates a group.

    Raises:
        Forbidden: the caller may not send normal messages at all (``Caller.may_send``).
    """
    if not caller.may_send():
        raise Forbidden("Sending messages needs an admin key or a key with a producer group.")
    group = grpc_producer_group(topic=topic, key_producer_groups=caller.key_producer_groups())
    if caller.may_produce(group) and producer_group_exists(group):
        return group
    return ""


def remoting_producer_group_resolve(*, caller: Caller, producer_group: str, topic: str) -> str:
    """The producer group a RocketMQ 4.x half message names (SEND_MESSAGE's ``producerGroup``:
    4.x clients, unlike 5.x ones, send their group), created on first use without
    ``check_url`` (its back-checks go over the producer's connection) when it does not exist.

    Raises:
        Forbidden: ``permission_denied`` when the caller may not act for the group;
            ``system_topic``.
        NotFound: ``topic_not_found`` (checked before a group is created).
        InvalidInput: a group name RocketMQ's ``Validators`` refuse.
    """
    if not caller.may_produce(producer_group):
        raise Forbidden(
            f"This caller may not act for producer group {producer_group}.",
            details={"producer_group": producer_group},
        )
    if not producer_group_exists(producer_group):
        producer_topic_get(topic)
        with contextlib.suppress(Conflict):  # created meanwhile by another call
            producer_group_create(name=producer_group, check_url=None)
    return producer_group


def remoting_sender_group(*, caller: Caller, producer_group: str) -> str:
    """The producer group a normal message sent over remoting is stored with: the header's
    ``producerGroup`` when it exists and the caller may act for it, else "" (as an HTTP send
    naming none). Never creates a group.

    Raises:
        Forbidden: the caller may not send normal messages at all (``Caller.may_send``).
    """
    if not caller.may_send():
        raise Forbidden("Sending messages needs an admin key or a key with a producer group.")
    if (
        producer_group
        and caller.may_produce(producer_group)
        and producer_group_exists(producer_group)
    ):
        return producer_group
    return ""
