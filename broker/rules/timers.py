"""Delay and timer messages: when a message is due, and its recall handle.

RocketMQ 5 sends a DELAY message with a delivery timestamp (``TIMER_DELIVER_MS``); RocketMQ 4.x
with a delay level (``MessageStoreConfig.messageDelayLevel``). The broker
(``HookUtils.transformTimerMessage``) stores a past or present time as a normal message,
delivered at once, and refuses one more than ``timerMaxDelaySec`` ahead. RocketMQ 5.3's
``RecallMessage`` names the message by a recall handle (``RecallMessageHandle.HandleV1``).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from broker.constants import BROKER_NAME, TIMER_TOPIC

DELAY_LEVELS_MS: tuple[int, ...] = tuple(
    seconds * 1000
    for seconds in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800)
) + (3_600_000, 7_200_000)
"""Delay level 1..18 -> delay (ms): RocketMQ ``messageDelayLevel``
"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"."""

SECONDS_AS_MS_ABOVE = 100_000_000_000
"""A ``delivery_timestamp.seconds`` above this (the year 5138 in seconds) is milliseconds: the
RocketMQ Python client 5.1.2 copies its millisecond ``delivery_timestamp`` into the protobuf
Timestamp's ``seconds`` unchanged (reference/rocketmq-grpc.md, "Delay / timer messages")."""

RECALL_HANDLE_VERSION = "v1"


class DeliveryTimeError(ValueError):
    """A delivery time or delay level the broker refuses; ``code`` names which rule."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def timer_del_uniq_key(topic: str, msg_id: str) -> str:
    """The ``TIMER_DEL_UNIQKEY`` of a recall's delete marker for the message ``msg_id``
    (UNIQ_KEY) of ``topic``: RocketMQ 5.3 ``TimerMessageStore.buildDeleteKey``,
    ``"<topic>+<msg_id>"``."""
    return f"{topic}+{msg_id}"


def delay_level_ms(level: int) -> int:
    """The delay (ms) of RocketMQ delay level ``level`` (1..18, ``DELAY_LEVELS_MS``).

    Raises:
        DeliveryTimeError: ``illegal_delay_level`` outside 1..18.
    """
    if not 1 <= level <= len(DELAY_LEVELS_MS):
        raise DeliveryTimeError(
            f"A delay level is 1 to {len(DELAY_LEVELS_MS)}, not {level}.",
            code="illegal_delay_level",
        )
    return DELAY_LEVELS_MS[level - 1]


def timestamp_ms(seconds: int, nanos: int) -> int:
    """A protobuf Timestamp as ms since the epoch; ``seconds`` above ``SECONDS_AS_MS_ABOVE``
    is read as ms already (the Python client's quirk), ``nanos`` then ignored."""
    if seconds > SECONDS_AS_MS_ABOVE:
        return seconds
    return seconds * 1000 + nanos // 1_000_000


def is_scheduled(delivery_timestamp: int, *, now: int, max_delay_ms: int) -> bool:
    """Whether a message due at ``delivery_timestamp`` (ms) waits for its time (True) or is
    stored as a normal message, delivered at once (False: now or in the past).

    Raises:
        DeliveryTimeError: ``illegal_delivery_time`` more than ``max_delay_ms`` ahead
            (RocketMQ ``timerMaxDelaySec``, WHEEL_TIMER_MSG_ILLEGAL).
    """
    if delivery_timestamp - now > max_delay_ms:
        raise DeliveryTimeError(
            f"A message may be delayed at most {max_delay_ms // 1000} s; this one is due "
            f"{(delivery_timestamp - now) // 1000} s from now.",
            code="illegal_delivery_time",
        )
    return delivery_timestamp > now


@dataclass(frozen=True)
class RecallHandle:
    """What a recall handle names: the topic, the broker, the due time (ms) and the msg_id."""

    topic: str
    broker_name: str
    delivery_timestamp: int
    msg_id: str


def recall_handle_format(handle: RecallHandle) -> str:
    """The recall handle of a scheduled message: URL-safe base64 of
    ``v1 <topic> <broker name> <due ms> <msg_id>`` (RocketMQ ``HandleV1.buildHandle``)."""
    raw = " ".join(
        (
            RECALL_HANDLE_VERSION,
            handle.topic,
            handle.broker_name,
            str(handle.delivery_timestamp),
            handle.msg_id,
        )
    )
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii")


def recall_handle_of(*, topic: str, delivery_timestamp: int, msg_id: str) -> str:
    """The recall handle Halfmoon answers for the message ``msg_id`` of ``topic`` due at
    ``delivery_timestamp`` (ms): ``recall_handle_format`` with its one broker's name
    (``BROKER_NAME``), the same over gRPC (SendMessage) and HTTP (``POST /messages``)."""
    return recall_handle_format(
        RecallHandle(
            topic=topic,
            broker_name=BROKER_NAME,
            delivery_timestamp=delivery_timestamp,
            msg_id=msg_id,
        )
    )


def recall_handle_parse(text: str) -> RecallHandle:
    """The parts of a recall handle (``recall_handle_format``'s inverse).

    Raises:
        ValueError: not a v1 recall handle (RocketMQ ``decodeHandle``: "recall handle is
            invalid").
    """
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii")).decode("utf-8")
    except (UnicodeError, binascii.Error, ValueError):
        raise ValueError("recall handle is invalid") from None
    items = raw.split(" ")
    if len(items) != 5 or items[0] != RECALL_HANDLE_VERSION or not items[3].isdigit():
        raise ValueError("recall handle is invalid")
    return RecallHandle(
        topic=items[1], broker_name=items[2], delivery_timestamp=int(items[3]), msg_id=items[4]
    )


@dataclass(frozen=True)
class ScheduleEvent:
    """One step of a scheduled message's life: ``kind`` ``sent``, ``due``, ``delivered`` or
    ``recalled`` at ``timestamp`` (ms); ``reached`` False for a due time still ahead or never
    reached (recalled before it); ``actor`` and ``reason`` of a recall; ``commit_log_offset``
    of the delivered copy, or of the stored one for ``sent``."""

    kind: str
    timestamp: int
    title: str
    reached: bool = True
    actor: str = ""
    reason: str = ""
    commit_log_offset: int | None = None


def schedule_timeline(
    *,
    state: str,
    topic: str,
    commit_log_offset: int,
    scheduled_timestamp: int,
    delivery_timestamp: int,
    ended_timestamp: int | None,
    delivered_commit_log_offset: int | None,
    recalled_by: str,
    recall_reason: str,
    now: int,
) -> list[ScheduleEvent]:
    """The timeline of a scheduled message in ``state`` (``SCHEDULED``, ``DELIVERED``,
    ``RECALLED``), oldest first: sent (stored on ``RMQ_SYS_WHEEL_TIMER``), its due time, and
    delivered on ``topic`` or recalled (by whom, why). Times in ms; ``now`` the clock."""
    events = [
        ScheduleEvent(
            "sent",
            scheduled_timestamp,
            f"Sent: stored on {TIMER_TOPIC}, invisible to consumers until its time",
            commit_log_offset=commit_log_offset,
        )
    ]
    if state == "RECALLED":
        events.append(
            ScheduleEvent(
                "recalled",
                ended_timestamp or scheduled_timestamp,
                "Recalled before its time: never delivered",
                actor=recalled_by,
                reason=recall_reason,
            )
        )
        due_title, reached = "Was due: recalled before, not delivered", False
    elif state == "DELIVERED":
        due_title, reached = "Due", True
    elif delivery_timestamp > now:
        due_title, reached = f"Scheduled for: delivered on {topic} then", False
    else:
        due_title, reached = "Due: waiting for the timer to move it", True
    events.append(ScheduleEvent("due", delivery_timestamp, due_title, reached=reached))
    if state == "DELIVERED":
        events.append(
            ScheduleEvent(
                "delivered",
                ended_timestamp or delivery_timestamp,
                f"Delivered on {topic}: visible to its consumers",
                commit_log_offset=delivered_commit_log_offset,
            )
        )
    return sorted(events, key=lambda event: event.timestamp)
