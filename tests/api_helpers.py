"""Helpers shared by the API contract tests (tests/test_api_*.py): the contract's error body,
and the calls producers and consumers make most, so that tests read as sentences."""

from __future__ import annotations

import re
from typing import Any

from rest_framework.test import APIClient

from broker.services.topology.writes import access_key_create
from tests.conftest import client_for

ERROR_KEYS = {"code", "message", "details"}
SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is the contract's error body, exactly ``{"error": {"code", "message",
    "details"}}``, as JSON with ``status``; returns the inner error object."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == ERROR_KEYS, error
    assert SNAKE_CASE.match(error["code"]), error["code"]
    assert isinstance(error["message"], str) and error["message"].strip(), error
    assert isinstance(error["details"], dict), error
    if code is not None:
        assert error["code"] == code, error
    return error


def key_client(name: str, **rights: Any) -> APIClient:
    """A client for a new access key ``name`` with the given rights (see access_key_create)."""
    _, token = access_key_create(name=name, **rights)
    return client_for(token)


def post(client: APIClient, url: str, data: Any = None) -> Any:
    return client.post(url, data, format="json")


def send_message(client: APIClient, topic: str = "TranTest", **fields: Any) -> Any:
    """POST /api/v1/messages with a text body unless a body is given."""
    data: dict[str, Any] = {"topic": topic, **fields}
    if "body" not in data and "body_base64" not in data:
        data["body"] = "hello"
    return post(client, "/api/v1/messages", data)


def send_half(
    client: APIClient, producer_group: str = "G", topic: str = "TranTest", **fields: Any
) -> Any:
    """POST /api/v1/transactions: a half message, with a text body unless a body is given."""
    data: dict[str, Any] = {"producer_group": producer_group, "topic": topic, **fields}
    if "body" not in data and "body_base64" not in data:
        data["body"] = "order 42 paid"
    return post(client, "/api/v1/transactions", data)


def end(
    client: APIClient, transaction_id: str, action: str, producer_group: str = "G", **fields: Any
) -> Any:
    """POST /api/v1/transactions/{id}/end."""
    return post(
        client,
        f"/api/v1/transactions/{transaction_id}/end",
        {"producer_group": producer_group, "action": action, **fields},
    )


def receive(client: APIClient, group: str = "C", topic: str = "TranTest", **fields: Any) -> Any:
    """POST /api/v1/consumer-groups/{group}/receive (no waiting unless asked)."""
    return post(
        client, f"/api/v1/consumer-groups/{group}/receive", {"topic": topic, "wait_ms": 0, **fields}
    )


def ack(client: APIClient, handles: list[str], group: str = "C") -> Any:
    return post(client, f"/api/v1/consumer-groups/{group}/ack", {"receipt_handles": handles})
