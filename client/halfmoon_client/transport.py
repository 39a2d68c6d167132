"""The HTTP layer shared by the producer, the consumer and the admin: a JSON client with the
bearer token that turns the contract's error bodies into ``HalfmoonError``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from halfmoon_client.errors import HalfmoonConnectionError, HalfmoonError
from halfmoon_client.states import LocalTransactionState

DEFAULT_TIMEOUT_S = 10.0
"""Per-request timeout (seconds) unless a client is given another; a long poll adds its wait."""


class JsonApi:
    """A thin JSON client of one broker: bearer token, contract errors as HalfmoonError.

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an access key.
        timeout_s: default per-request timeout in seconds.
    """

    def __init__(self, base_url: str, token: str, *, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, Any]:
        """Send one request; return (status, parsed JSON) of a 2xx answer.

        Raises:
            HalfmoonError: a non-2xx answer. HalfmoonConnectionError: no answer.
        """
        try:
            response = self._http.request(
                method,
                path,
                json=json_body,
                params=params,
                timeout=timeout_s if timeout_s is not None else self.timeout_s,
            )
        except httpx.TransportError as exc:
            raise HalfmoonConnectionError(
                f"{method} {self.base_url}{path} failed: {type(exc).__name__}: {exc}",
                code="connection_error",
            ) from exc
        if not 200 <= response.status_code < 300:
            raise HalfmoonError.from_response(response)
        try:
            return response.status_code, response.json() if response.content else None
        except ValueError as exc:
            raise HalfmoonError(
                f"{method} {path} answered {response.status_code} with a body that is not JSON.",
                code="invalid_response",
                status_code=response.status_code,
            ) from exc

    def close(self) -> None:
        """Close the connections."""
        self._http.close()


def path_segment(name: str) -> str:
    """A path segment: group names may hold ``%`` and ``|``."""
    return quote(name, safe="")


class ClientBase:
    """What every client holds: the broker's URL, the token, the timeout and a ``JsonApi``.

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an access key.
        timeout_s: per-request timeout in seconds.
    """

    def __init__(self, base_url: str, token: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._base_url = base_url
        self._token = token
        self._timeout_s = timeout_s
        self._api = JsonApi(base_url, token, timeout_s=timeout_s)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._api.close()


def transaction_end(
    api: JsonApi,
    *,
    producer_group: str,
    transaction_id: str,
    state: LocalTransactionState,
    from_transaction_check: bool,
    remark: str | None,
) -> dict[str, Any]:
    """``POST /api/v1/transactions/{id}/end`` (RocketMQ END_TRANSACTION) with ``state.action``.

    Returns:
        ``{"transaction_id", "state", ...}``; once COMMITTED also ``msg_id``, ``topic``,
        ``queue_id``, ``queue_offset``.

    Raises:
        HalfmoonError: 404 unknown id, 403 another group's transaction, 409
            ``transaction_already_resolved`` (``details["state"]``).
    """
    body = {
        "producer_group": producer_group,
        "action": state.action,
        "from_transaction_check": from_transaction_check,
        "remark": remark,
    }
    path = f"/api/v1/transactions/{path_segment(transaction_id)}/end"
    return api.request("POST", path, json_body=body)[1]
