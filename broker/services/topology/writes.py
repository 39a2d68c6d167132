"""Operators' writes: topics, producer and consumer groups, access keys.

Every path that creates or changes these (the API, ``manage.py create_access_key``, the Django
admin) goes through this module, so their invariants hold whatever the caller: a topic has one
``ConsumeQueue`` row per queue, a producer group a random ``check_secret``, an access key the
SHA-256 of a token that is never stored. The ``*_validate`` functions are the same checks on
their own, for forms that report errors before anything is written (``broker.admin``).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import IntegrityError, transaction

from broker.conf import conf
from broker.constants import NAME_PATTERN
from broker.errors import ExistsKind, InvalidInput, NotFound, already_exists, not_found
from broker.lookups import consumer_group_forget
from broker.models import AccessKey, ConsumeQueue, ConsumerGroup, ProducerGroup, Topic
from broker.rules.message_types import TopicMessageType
from broker.rules.topics import QUEUE_NUMS_MAX, QUEUE_NUMS_MIN, is_system_topic, queue_nums_valid
from broker.services.checks.targets import check_url_refusal

TOKEN_PREFIX = "hm_"


def token_hash(token: str) -> str:
    """SHA-256 hex digest of an access key token: the only form in which tokens are stored."""
    return hashlib.sha256(token.encode()).hexdigest()


# Groups the broker uses itself (RocketMQ MixAll: CID_RMQ_SYS_*, the system producer groups).
RESERVED_GROUP_PREFIXES = ("CID_RMQ_SYS_", "CID_SYS_RMQ_", "PID_RMQ_SYS_", "RMQ_SYS_")


def name_validate(kind: str, name: str) -> None:
    """Check a topic or group name against ``^[%|a-zA-Z0-9_-]{1,127}$`` (RocketMQ
    TopicValidator); ``kind`` ("topic", "producer group", ...) names it in the message.

    Raises:
        InvalidInput: ``invalid_name``.
    """
    if not NAME_PATTERN.match(name or ""):
        raise InvalidInput(
            f"The {kind} name {name!r} must match ^[%|a-zA-Z0-9_-]{{1,127}}$.",
            code="invalid_name",
            details={"name": name},
        )


def group_name_validate(kind: str, name: str) -> None:
    """Check a new producer or consumer group's name: ``name_validate`` and none of the
    prefixes the broker keeps for its own groups (``RESERVED_GROUP_PREFIXES``).

    Raises:
        InvalidInput: ``invalid_name`` or ``reserved_group``.
    """
    name_validate(kind, name)
    if name.startswith(RESERVED_GROUP_PREFIXES):
        raise InvalidInput(
            f"{name} is reserved for the broker's own use.",
            code="reserved_group",
            details={"name": name},
        )


def topic_name_validate(name: str) -> None:
    """Check a new topic's name: ``name_validate`` and not a system topic (RMQ_SYS_*, ...).

    Raises:
        InvalidInput: ``invalid_name`` or ``system_topic``.
    """
    name_validate("topic", name)
    if is_system_topic(name):
        raise InvalidInput(
            f"{name} is a system topic name.", code="system_topic", details={"name": name}
        )


def queue_nums_validate(queue_nums: int, *, current: int | None = None) -> None:
    """Check a topic's ``queue_nums``: within ``QUEUE_NUMS_MIN..QUEUE_NUMS_MAX`` and, for an
    existing topic with ``current`` queues, not fewer than it has (messages stored in a removed
    queue would never be delivered again).

    Raises:
        InvalidInput: ``invalid_queue_nums``.
    """
    if not queue_nums_valid(queue_nums):
        raise InvalidInput(
            f"queue_nums must be between {QUEUE_NUMS_MIN} and {QUEUE_NUMS_MAX}.",
            code="invalid_queue_nums",
        )
    if current is not None and queue_nums < current:
        raise InvalidInput(
            f"A topic's queues cannot be removed: it has {current}, not {queue_nums}.",
            code="invalid_queue_nums",
        )


def max_delivery_attempts_validate(attempts: int) -> None:
    """Check a consumer group's ``max_delivery_attempts`` (RocketMQ retryMaxTimes): at least 1.

    Raises:
        InvalidInput: ``invalid_max_delivery_attempts``.
    """
    if attempts < 1:
        raise InvalidInput(
            "max_delivery_attempts must be at least 1.", code="invalid_max_delivery_attempts"
        )


def access_key_groups_validate(groups: list[str]) -> None:
    """Check the group names an access key is given rights to (``name_validate``; the groups
    need not exist yet).

    Raises:
        InvalidInput: ``invalid_name``.
    """
    for group in groups:
        name_validate("group", group)


def check_url_validate(check_url: str | None) -> None:
    """Check a producer group's ``check_url`` before it is stored (None or "": the group
    polls, nothing to check): http or https; no link-local, multicast or unspecified address;
    not the broker itself; every address in ``HALFMOON_CHECK_URL_ALLOWED_NETWORKS`` (a host
    name not listed there by name is resolved now). The rule: ``broker.rules.check_targets``;
    the resolution: ``broker.services.checks.targets.check_url_refusal``. The same rule runs
    again on the resolved addresses each time a check is sent.

    Raises:
        InvalidInput: ``check_url_not_allowed`` (api-v1), ``details``: ``field``
            ("check_url"), ``check_url``, ``rule`` (``scheme``, ``link_local``, ``multicast``,
            ``unspecified``, ``broker_itself``, ``not_allowed``, ``unresolved``,
            ``malformed``).
    """
    if not check_url:
        return
    refusal = check_url_refusal(check_url)
    if refusal is not None:
        raise InvalidInput(
            f"check_url refused ({refusal.rule}): {refusal.message}",
            code="check_url_not_allowed",
            details={"field": "check_url", "check_url": check_url, "rule": refusal.rule},
        )


def _consume_queues_ensure(topic: str, queue_nums: int) -> None:
    """Create the missing ``ConsumeQueue`` rows 0..queue_nums-1 of ``topic``."""
    ConsumeQueue.objects.bulk_create(
        [ConsumeQueue(topic=topic, queue_id=q) for q in range(queue_nums)], ignore_conflicts=True
    )


@contextmanager
def created_once(kind: ExistsKind, name: str) -> Iterator[None]:
    """Run the creation of a ``kind`` named ``name`` in its own database transaction; a
    unique-name violation (a concurrent or repeated create) becomes ``already_exists``."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        raise already_exists(kind, name) from exc


def topic_message_type_validate(message_type: str) -> None:
    """Check a topic's ``message_type``: NORMAL, FIFO, DELAY, TRANSACTION or MIXED
    (``broker.rules.message_types.TopicMessageType``).

    Raises:
        InvalidInput: ``invalid_message_type``.
    """
    if message_type not in TopicMessageType.values:
        raise InvalidInput(
            f"message_type must be one of {', '.join(TopicMessageType.values)}.",
            code="invalid_message_type",
            details={"message_type": message_type},
        )


def topic_create(
    *, name: str, queue_nums: int, message_type: str = TopicMessageType.MIXED
) -> Topic:
    """Create a topic with ``queue_nums`` queues (1-1024) and their consume queues, accepting
    ``message_type`` messages (RocketMQ's ``message.type``; MIXED, every type, when not
    given: api-v1 topics predate types and take every message).

    Raises:
        InvalidInput: bad name, a system topic name, queue_nums out of range, an unknown
            message_type.
        Conflict: ``topic_exists``.
    """
    topic_name_validate(name)
    queue_nums_validate(queue_nums)
    topic_message_type_validate(message_type)
    with created_once("topic", name):
        topic = Topic.objects.create(name=name, queue_nums=queue_nums, message_type=message_type)
        _consume_queues_ensure(name, queue_nums)
    return topic


def topic_update(
    *, name: str, queue_nums: int | None = None, message_type: str | None = None
) -> Topic:
    """Change the user topic ``name``: more queues (``queue_nums``: at least its current
    number, at most 1024, creating the new consume queues) and/or another ``message_type``;
    None (or the same value) leaves either as it is.

    Other processes see the change once their cached topic expires
    (``HALFMOON_LOOKUP_CACHE_MS``); until then they send to the old queues, which stay valid,
    and check the old type. A new type applies to the messages sent from then on: the stored
    ones, and the half and delay messages waiting, are delivered as they are (RocketMQ's
    ``updateTopic`` changes ``message.type`` the same way).

    Raises:
        NotFound: ``topic_not_found`` (system topics included: the broker owns them).
        InvalidInput: ``invalid_queue_nums``, ``invalid_message_type``.
    """
    if message_type is not None:
        topic_message_type_validate(message_type)
    with transaction.atomic():
        topic = Topic.objects.select_for_update().filter(name=name, system=False).first()
        if topic is None:
            raise not_found("topic", name)
        changed = []
        if queue_nums is not None:
            queue_nums_validate(queue_nums, current=topic.queue_nums)
            if queue_nums != topic.queue_nums:
                topic.queue_nums = queue_nums
                changed.append("queue_nums")
        if message_type is not None and message_type != topic.message_type:
            topic.message_type = message_type
            changed.append("message_type")
        if changed:
            topic.save(update_fields=changed)  # post_save forgets the cached topic
        if "queue_nums" in changed:
            _consume_queues_ensure(name, topic.queue_nums)
    return topic


def producer_group_create(*, name: str, check_url: str | None) -> ProducerGroup:
    """Create a producer group with a new random ``check_secret`` (32 bytes, hex).

    ``check_url`` None means its producers poll for check requests; otherwise it must pass
    ``check_url_validate``.

    Raises:
        InvalidInput: bad name; ``check_url_not_allowed``. Conflict: ``producer_group_exists``.
    """
    group_name_validate("producer group", name)
    check_url_validate(check_url)
    with created_once("producer_group", name):
        return ProducerGroup.objects.create(
            name=name, check_url=check_url or None, check_secret=secrets.token_hex(32)
        )


def producer_group_update(*, name: str, check_url: str | None) -> ProducerGroup:
    """Change a producer group's ``check_url`` (None: its producers poll; a URL must pass
    ``check_url_validate``).

    Raises:
        InvalidInput: ``check_url_not_allowed``. NotFound: ``producer_group_not_found``.
    """
    check_url_validate(check_url)
    updated = ProducerGroup.objects.filter(name=name).update(
        check_url=check_url or None, unreachable_since=None, last_check_error=""
    )
    if not updated:
        raise not_found("producer_group", name)
    return ProducerGroup.objects.get(name=name)


def consumer_group_create(*, name: str, max_delivery_attempts: int | None = None) -> ConsumerGroup:
    """Create a consumer group; ``max_delivery_attempts`` defaults to
    ``HALFMOON_MAX_DELIVERY_ATTEMPTS`` (16, RocketMQ maxReconsumeTimes).

    Raises:
        InvalidInput: bad name or attempts below 1. Conflict: ``consumer_group_exists``.
    """
    group_name_validate("consumer group", name)
    attempts = max_delivery_attempts or conf.max_delivery_attempts
    max_delivery_attempts_validate(attempts)
    with created_once("consumer_group", name):
        return ConsumerGroup.objects.create(name=name, max_delivery_attempts=attempts)


def consumer_group_update(*, name: str, max_delivery_attempts: int) -> ConsumerGroup:
    """Change a consumer group's ``max_delivery_attempts``; deliveries already counted keep
    their count, and the next failed one is compared with the new number.

    Raises:
        InvalidInput: attempts below 1. NotFound: ``consumer_group_not_found``.
    """
    max_delivery_attempts_validate(max_delivery_attempts)
    if not ConsumerGroup.objects.filter(name=name).update(
        max_delivery_attempts=max_delivery_attempts
    ):
        raise not_found("consumer_group", name)
    transaction.on_commit(lambda: consumer_group_forget(name))
    consumer_group_forget(name)
    return ConsumerGroup.objects.get(name=name)


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
    access_key_groups_validate([*(producer_groups or []), *(consumer_groups or [])])
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with created_once("access_key", name):
        key = AccessKey.objects.create(
            name=name,
            token_prefix=token[:10],
            token_hash=token_hash(token),
            is_admin=is_admin,
            producer_groups=sorted(set(producer_groups or [])),
            consumer_groups=sorted(set(consumer_groups or [])),
        )
    return key, token


def access_key_update(
    *, name: str, is_admin: bool, producer_groups: list[str], consumer_groups: list[str]
) -> AccessKey:
    """Change an access key's rights; its token stays the same. This process sees the change at
    once, every other within 1 s of the commit (``broker.lookups``: the access keys' generation
    in Redis; within ``HALFMOON_LOOKUP_CACHE_MS`` while Redis is away).

    Raises:
        InvalidInput: a bad group name. NotFound: ``access_key_not_found``.
    """
    access_key_groups_validate([*producer_groups, *consumer_groups])
    key = AccessKey.objects.filter(name=name).first()
    if key is None:
        raise NotFound(
            f"Access key {name} does not exist.",
            code="access_key_not_found",
            details={"name": name},
        )
    key.is_admin = is_admin
    key.producer_groups = sorted(set(producer_groups))
    key.consumer_groups = sorted(set(consumer_groups))
    key.save(update_fields=["is_admin", "producer_groups", "consumer_groups"])  # forgets cache
    return key
