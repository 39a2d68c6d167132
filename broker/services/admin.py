"""Operators' writes: topics, producer and consumer groups, access keys."""

from __future__ import annotations

import hashlib
import secrets

from django.db import IntegrityError, transaction

from broker.conf import conf
from broker.constants import NAME_PATTERN, is_system_topic
from broker.errors import Conflict, InvalidInput, NotFound
from broker.models import AccessKey, ConsumeQueue, ConsumerGroup, ProducerGroup, Topic

TOKEN_PREFIX = "hm_"


def token_hash(token: str) -> str:
    """SHA-256 hex digest of an access key token: the only form in which tokens are stored."""
    return hashlib.sha256(token.encode()).hexdigest()


# Groups the broker uses itself (RocketMQ MixAll: CID_RMQ_SYS_*, the system producer groups).
RESERVED_GROUP_PREFIXES = ("CID_RMQ_SYS_", "CID_SYS_RMQ_", "PID_RMQ_SYS_", "RMQ_SYS_")


def _check_group_name(kind: str, name: str) -> None:
    _check_name(kind, name)
    if name.startswith(RESERVED_GROUP_PREFIXES):
        raise InvalidInput(
            f"{name} is reserved for the broker's own use.",
            code="reserved_group",
            details={"name": name},
        )


def _check_name(kind: str, name: str) -> None:
    if not NAME_PATTERN.match(name or ""):
        raise InvalidInput(
            f"The {kind} name {name!r} must match ^[%|a-zA-Z0-9_-]{{1,127}}$.",
            code="invalid_name",
            details={"name": name},
        )


def topic_create(*, name: str, queue_nums: int) -> Topic:
    """Create a topic with ``queue_nums`` queues (1-1024).

    Raises:
        InvalidInput: bad name, a system topic name, or queue_nums out of range.
        Conflict: ``topic_exists``.
    """
    _check_name("topic", name)
    if is_system_topic(name):
        raise InvalidInput(
            f"{name} is a system topic name.", code="system_topic", details={"name": name}
        )
    if not 1 <= queue_nums <= 1024:
        raise InvalidInput("queue_nums must be between 1 and 1024.", code="invalid_queue_nums")
    try:
        with transaction.atomic():
            topic = Topic.objects.create(name=name, queue_nums=queue_nums)
            ConsumeQueue.objects.bulk_create(
                [ConsumeQueue(topic=name, queue_id=q) for q in range(queue_nums)]
            )
    except IntegrityError as exc:
        raise Conflict(
            f"Topic {name} already exists.", code="topic_exists", details={"name": name}
        ) from exc
    return topic


def producer_group_create(*, name: str, check_url: str | None) -> ProducerGroup:
    """Create a producer group with a new random ``check_secret`` (32 bytes, hex).

    ``check_url`` None means its producers poll for check requests.

    Raises:
        InvalidInput: bad name. Conflict: ``producer_group_exists``.
    """
    _check_group_name("producer group", name)
    try:
        with transaction.atomic():
            return ProducerGroup.objects.create(
                name=name, check_url=check_url or None, check_secret=secrets.token_hex(32)
            )
    except IntegrityError as exc:
        raise Conflict(
            f"Producer group {name} already exists.",
            code="producer_group_exists",
            details={"name": name},
        ) from exc


def producer_group_update(*, name: str, check_url: str | None) -> ProducerGroup:
    """Change a producer group's ``check_url`` (None: its producers poll).

    Raises:
        NotFound: ``producer_group_not_found``.
    """
    updated = ProducerGroup.objects.filter(name=name).update(
        check_url=check_url or None, unreachable_since=None, last_check_error=""
    )
    if not updated:
        raise NotFound(f"Producer group {name} does not exist.", code="producer_group_not_found")
    return ProducerGroup.objects.get(name=name)


def consumer_group_create(*, name: str, max_delivery_attempts: int | None = None) -> ConsumerGroup:
    """Create a consumer group; ``max_delivery_attempts`` defaults to
    ``HALFMOON_MAX_DELIVERY_ATTEMPTS`` (16, RocketMQ maxReconsumeTimes).

    Raises:
        InvalidInput: bad name or attempts below 1. Conflict: ``consumer_group_exists``.
    """
    _check_group_name("consumer group", name)
    attempts = max_delivery_attempts or conf.max_delivery_attempts
    if attempts < 1:
        raise InvalidInput(
            "max_delivery_attempts must be at least 1.", code="invalid_max_delivery_attempts"
        )
    try:
        with transaction.atomic():
            return ConsumerGroup.objects.create(name=name, max_delivery_attempts=attempts)
    except IntegrityError as exc:
        raise Conflict(
            f"Consumer group {name} already exists.",
            code="consumer_group_exists",
            details={"name": name},
        ) from exc


def access_key_create(
    *,
    name: str,
    is_admin: bool = False,
    producer_groups: list[str] | None = None,
    consumer_groups: list[str] | None = None,
) -> tuple[AccessKey, str]:
    """Create an access key; return it and its token, which is shown this once only.

    Raises:
        InvalidInput: a bad group name. Conflict: ``access_key_exists``.
    """
    for group in [*(producer_groups or []), *(consumer_groups or [])]:
        _check_name("group", group)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            key = AccessKey.objects.create(
                name=name,
                token_prefix=token[:10],
                token_hash=token_hash(token),
                is_admin=is_admin,
                producer_groups=sorted(set(producer_groups or [])),
                consumer_groups=sorted(set(consumer_groups or [])),
            )
    except IntegrityError as exc:
        raise Conflict(f"Access key {name} already exists.", code="access_key_exists") from exc
    return key, token
