"""Which topics are the broker's own: the one definition of the system-topic rule.

RocketMQ keeps two lists (``TopicValidator``): system topics no client may send to
(``RMQ_SYS_*``, ``TRANS_CHECK_MAX_TIME_TOPIC``, and the per-group ``%RETRY%*`` and ``%DLQ%*``),
and, among them, the ones whose messages are never delivered to a consumer (half and Op
messages, discarded half messages). A consumer group may read its own ``%RETRY%`` and ``%DLQ%``
topics.
"""

from __future__ import annotations

import re

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPIC_PREFIX,
)


def is_undeliverable_topic(name: str) -> bool:
    """True for the topics whose messages no consumer receives: ``RMQ_SYS_*`` (half and Op
    messages) and ``TRANS_CHECK_MAX_TIME_TOPIC`` (discarded half messages)."""
    return name.startswith(SYSTEM_TOPIC_PREFIX) or name == CHECK_MAX_TIME_TOPIC


def is_system_topic(name: str) -> bool:
    """True for the broker's own topics, which producers may not send to and which are not user
    topics: the undeliverable ones plus ``%RETRY%*`` and ``%DLQ%*`` (api-v1, "Producers may not
    send to system topics"; RocketMQ ``TopicValidator.isSystemTopic`` and the retry/DLQ
    prefixes)."""
    return is_undeliverable_topic(name) or name.startswith(
        (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
    )


def system_topic_pattern() -> str:
    """A regular expression (ECMA 262 and Python alike) matching exactly the names
    ``is_system_topic`` is true for; the OpenAPI document says with it which new topic names
    are refused (``broker.api.schema``)."""
    prefixes = "|".join(
        re.escape(p)
        for p in (SYSTEM_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
    )
    return f"^(?:{prefixes})|^{re.escape(CHECK_MAX_TIME_TOPIC)}$"


QUEUE_NUMS_MIN = 1
QUEUE_NUMS_MAX = 1024
"""Bounds of a topic's ``queue_nums`` (RocketMQ TopicConfig readQueueNums/writeQueueNums).
The model's CheckConstraint, the service and the API serializer all read these two."""


def queue_nums_valid(queue_nums: int) -> bool:
    """True when a topic may have ``queue_nums`` queues (``QUEUE_NUMS_MIN..QUEUE_NUMS_MAX``)."""
    return QUEUE_NUMS_MIN <= queue_nums <= QUEUE_NUMS_MAX
