"""RocketMQ's names for system topics, properties, flags and states.

Sources: MixAll, MessageConst, TopicValidator, MessageSysFlag and TransactionalMessageUtil
in Apache RocketMQ 4.9.7 / 5.3.
"""

from __future__ import annotations

import re

# System topics (TopicValidator).
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
# Where delay and timer messages wait for their time (RocketMQ's rmq_sys_wheel_timer).
TIMER_TOPIC = "RMQ_SYS_WHEEL_TIMER"

# The internal consumer group whose offsets are the half/Op scan checkpoints.
CHECK_GROUP = "CID_RMQ_SYS_TRANS"

# Op message tag for "this half message is done" (TransactionalMessageUtil.REMOVETAG).
OP_REMOVE_TAG = "d"

# Message properties (MessageConst).
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_DISCARD_REASON = "DISCARD_REASON"
PROPERTY_HALF_QUEUE_OFFSET = "HALF_QUEUE_OFFSET"
PROPERTY_DELIVERY_ATTEMPT = "DELIVERY_ATTEMPT"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# A recall's delete marker on the timer topic names the message it takes back (RocketMQ 5.3
# RecallMessageProcessor: TimerMessageStore.buildDeleteKey, "<real topic>+<UNIQ_KEY>").
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"

# Properties a producer may not set: the broker owns them.
RESERVED_PROPERTIES = frozenset(
    {
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_UNIQ_KEY,
        PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
        PROPERTY_TRANSACTION_CHECK_TIMES,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_DISCARD_REASON,
        PROPERTY_HALF_QUEUE_OFFSET,
        PROPERTY_DELIVERY_ATTEMPT,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DEL_UNIQKEY,
        PROPERTY_DELAY_TIME_LEVEL,
        "KEYS",
        "TAGS",
    }
)

# MessageSysFlag transaction type bits.
SYS_FLAG_TRANSACTION_NOT_TYPE = 0x0
SYS_FLAG_TRANSACTION_PREPARED_TYPE = 0x4
SYS_FLAG_TRANSACTION_COMMIT_TYPE = 0x8
SYS_FLAG_TRANSACTION_ROLLBACK_TYPE = 0xC

# Topic and group names (Validators.VALID_PATTERN_STR, CHARACTER_MAX_LENGTH 127).
NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")

# Message and transaction ids: a producer's own, or the broker's 32 hex digits.
MSG_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")

# SimpleConsumer bounds (RocketMQ 5 proxy ProxyConfig / receive validation).
RECEIVE_MAX_MESSAGES = (1, 32)
RECEIVE_INVISIBLE_DURATION_MS = (10_000, 43_200_000)
RECEIVE_WAIT_MS = (0, 30_000)

# The name of Halfmoon's one broker: in gRPC routes and in recall handles (RocketMQ brokerName).
BROKER_NAME = "halfmoon"

# The status of a stored send (SendStatus.SEND_OK): api-v1's answer to a send and a half message.
SEND_OK = "SEND_OK"

# Finish-latency buckets of rocketmq_finish_message_latency, in seconds (RIP-46).
FINISH_LATENCY_BUCKETS_S = (5.0, 60.0, 600.0, 3600.0, 43200.0, 86400.0)


def dlq_topic(consumer_group: str) -> str:
    """The dead-letter topic of a consumer group: ``%DLQ%{group}`` (MixAll.getDLQTopic)."""
    return f"{DLQ_GROUP_TOPIC_PREFIX}{consumer_group}"
