"""``HalfmoonAdmin``: the operator calls a producer application or the seed demo needs
(health, topics, producer and consumer groups), with an admin access key."""

from __future__ import annotations

from typing import Any

from halfmoon_client.transport import ClientBase
from halfmoon_client.transport import path_segment as _seg


class HalfmoonAdmin(ClientBase):
    """Operator calls with an admin access key (RocketMQ ``MQAdminExt``, in part).

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an admin access key (``manage.py create_access_key NAME --admin``).
        timeout_s: per-request timeout in seconds.

    Every method raises ``HalfmoonError`` on a non-2xx answer.
    """

    def __enter__(self) -> HalfmoonAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", ...}``; raises HalfmoonError with 503."""
        return self._api.request("GET", "/healthz")[1]

    def create_topic(
        self, name: str, queue_nums: int = 4, message_type: str | None = None
    ) -> dict[str, Any]:
        """``POST /api/v1/topics``: ``{"name", "queue_nums", "message_type",
        "created_timestamp"}``; 409 ``topic_exists`` if it exists. ``message_type``: NORMAL,
        FIFO, DELAY, TRANSACTION or MIXED (None: the broker's default, MIXED)."""
        body: dict[str, Any] = {"name": name, "queue_nums": queue_nums}
        if message_type is not None:
            body["message_type"] = message_type
        return self._api.request("POST", "/api/v1/topics", json_body=body)[1]

    def get_topic(self, name: str) -> dict[str, Any]:
        """``GET /api/v1/topics/{name}``: the topic with each queue's min and max offset."""
        return self._api.request("GET", f"/api/v1/topics/{_seg(name)}")[1]

    def create_producer_group(self, name: str, check_url: str | None = None) -> dict[str, Any]:
        """``POST /api/v1/producer-groups``: ``{"name", "check_url", "check_secret", ...}``. The
        ``check_secret`` that signs back-checks is shown in this answer only."""
        body = {"name": name, "check_url": check_url}
        return self._api.request("POST", "/api/v1/producer-groups", json_body=body)[1]

    def update_producer_group(self, name: str, check_url: str | None) -> dict[str, Any]:
        """``PATCH /api/v1/producer-groups/{name}``: change its ``check_url`` (None: its
        producers poll)."""
        return self._api.request(
            "PATCH", f"/api/v1/producer-groups/{_seg(name)}", json_body={"check_url": check_url}
        )[1]

    def get_producer_group(self, name: str) -> dict[str, Any]:
        """``GET /api/v1/producer-groups/{name}`` (with ``unreachable_since``)."""
        return self._api.request("GET", f"/api/v1/producer-groups/{_seg(name)}")[1]

    def create_consumer_group(
        self, name: str, max_delivery_attempts: int | None = None
    ) -> dict[str, Any]:
        """``POST /api/v1/consumer-groups``: ``{"name", "max_delivery_attempts", ...}``."""
        body: dict[str, Any] = {"name": name}
        if max_delivery_attempts is not None:
            body["max_delivery_attempts"] = max_delivery_attempts
        return self._api.request("POST", "/api/v1/consumer-groups", json_body=body)[1]

    def get_transaction(self, transaction_id: str) -> dict[str, Any]:
        """``GET /api/v1/transactions/{id}``: ``{"transaction_id", "state", "check_times",
        "resolved_by", ...}``."""
        return self._api.request("GET", f"/api/v1/transactions/{_seg(transaction_id)}")[1]
