"""``SimpleConsumer``: receive a batch with an invisible duration, then ack each message
(RocketMQ 5 ``org.apache.rocketmq.client.apis.consumer.SimpleConsumer``)."""

from __future__ import annotations

from collections.abc import Iterable

from halfmoon_client.filters import SUB_ALL, FilterExpression
from halfmoon_client.messages import MessageView
from halfmoon_client.transport import DEFAULT_TIMEOUT_S, ClientBase
from halfmoon_client.transport import path_segment as _seg


class SimpleConsumer(ClientBase):
    """A RocketMQ 5 ``SimpleConsumer``: receive a batch, process, ack each message.

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an access key with this consumer group (or an admin key).
        consumer_group: the group; every group sees every visible message of the topic.
        topic: the topic to receive from.
        filter_expression: which of its messages to receive (``FilterExpression``: TAG or
            SQL92, applied by the broker); default every message.
        timeout_s: per-request timeout in seconds (a long poll adds its ``wait_ms``).

    A message not acked within its invisible duration is delivered again with
    ``delivery_attempt`` + 1 and a new ``receipt_handle``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        consumer_group: str,
        topic: str,
        *,
        filter_expression: FilterExpression = SUB_ALL,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(base_url, token, timeout_s=timeout_s)
        self.consumer_group = consumer_group
        self.topic = topic
        self.filter_expression = filter_expression

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def receive(
        self, max_messages: int = 32, invisible_duration_ms: int = 30_000, wait_ms: int = 0
    ) -> list[MessageView]:
        """``POST /api/v1/consumer-groups/{group}/receive``.

        Args:
            max_messages: 1-32.
            invisible_duration_ms: 10,000-43,200,000 ms; how long the messages stay hidden from
                the group's other receivers.
            wait_ms: 0-30,000 ms; how long to wait for a message when none is ready.

        Returns:
            the messages (possibly none), each with ``receipt_handle`` and ``delivery_attempt``.

        Raises:
            HalfmoonError: 400 a bound exceeded or ``illegal_filter_expression``, 403, 404
                unknown group or topic.
        """
        body = {
            "topic": self.topic,
            "filter": self.filter_expression.to_json(),
            "max_messages": max_messages,
            "invisible_duration_ms": invisible_duration_ms,
            "wait_ms": wait_ms,
        }
        out = self._api.request(
            "POST",
            f"/api/v1/consumer-groups/{_seg(self.consumer_group)}/receive",
            json_body=body,
            timeout_s=wait_ms / 1000 + self._timeout_s,
        )[1]
        return [MessageView.from_json(m) for m in out.get("messages", [])]

    def ack(
        self, messages_or_handles: Iterable[MessageView | str]
    ) -> tuple[int, list[dict[str, str]]]:
        """``POST /api/v1/consumer-groups/{group}/ack``.

        Args:
            messages_or_handles: received ``MessageView``s or their receipt handles.

        Returns:
            (acked, failed): ``failed`` lists ``{"receipt_handle", "code"}`` for handles that
            were acked already or superseded by a redelivery. An empty input sends nothing.

        Raises:
            HalfmoonError: 400, 403.
        """
        handles: list[str] = []
        for item in messages_or_handles:
            handle = item.receipt_handle if isinstance(item, MessageView) else item
            if not handle:
                raise ValueError("Only received messages (with a receipt_handle) can be acked.")
            handles.append(handle)
        if not handles:
            return 0, []
        out = self._api.request(
            "POST",
            f"/api/v1/consumer-groups/{_seg(self.consumer_group)}/ack",
            json_body={"receipt_handles": handles},
        )[1]
        return int(out["acked"]), list(out.get("failed", []))
