"""The HTTP layer shared by the producer, the consumer and the admin: a JSON client with the
bearer token that turns the contract's error bodies into ``HalfmoonError``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote

import httpx

from halfmoon_client.errors import HalfmoonConnectionError, HalfmoonError
from halfmoon_client.states import LocalTransactionState

DEFAULT_TIMEOUT_S = 10.0
"""Per-request timeout (seconds) unless a client is given another; a long poll adds its wait."""

DEFAULT_BATCH_MAX_MESSAGES = 128
"""Items per batch request unless a client is given another: the broker's default
``HALFMOON_BATCH_MAX_MESSAGES`` (api-v1 "Batches")."""

EventHooks = Mapping[str, Sequence[Callable[..., Any]]]
"""httpx event hooks: ``{"request": [fn(request)], "response": [fn(response)]}``."""


class JsonApi:
    """A thin JSON client of one broker: bearer token, contract errors as HalfmoonError.

    Args:
        base_url: the broker, e.g. ``"http://127.0.0.1:8000"``.
        token: an access key.
        timeout_s: default per-request timeout in seconds.
        event_hooks: httpx event hooks called on every request / response (e.g. to log or
            count them); None for none.
    """

    def __init__(
        self, base_url: str, token: str, *, timeout_s: float, event_hooks: EventHooks | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout_s,
            event_hooks={name: list(hooks) for name, hooks in (event_hooks or {}).items()},
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
        event_hooks: httpx event hooks for every request of this client (``JsonApi``).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        event_hooks: EventHooks | None = None,
    ) -> None:
        self._base_url = base_url
        self._token = token
        self._timeout_s = timeout_s
        self._event_hooks = event_hooks
        self._api = JsonApi(base_url, token, timeout_s=timeout_s, event_hooks=event_hooks)

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


class TransactionEnd(NamedTuple):
    """One end of ``POST /api/v1/transactions/end-batch``: the transaction, the local
    transaction's state (its ``action``), and the single end's optional fields."""

    transaction_id: str
    state: LocalTransactionState
    remark: str | None = None
    from_transaction_check: bool = False


BatchOutcome = tuple[int, Any] | HalfmoonError
"""One item of a batch answer: ``(status, body)`` as the single endpoint would have answered
(201 or 200), or the ``HalfmoonError`` it would have raised for that item alone."""


def batch_request(
    api: JsonApi, path: str, field: str, items: Sequence[Any], *, max_items: int
) -> list[BatchOutcome]:
    """POST ``items`` to a batch endpoint of api-v1 "Batches" as ``{field: [...]}``, in
    requests of at most ``max_items`` items; return one outcome per item, in order.

    A request refused whole is retried split, so that one oversized request does not fail
    items that fit: 413 (the body limit) in two halves, 400 ``batch_too_large`` in chunks of
    the broker's ``details["max_messages"]``. Any other whole-request error (401, a
    connection error, a 413 of one item) becomes the outcome of each item of that request, a
    copy each (``HalfmoonError.copy``): other requests of the same call are not undone.

    Args:
        api: the client.
        path: ``/api/v1/transactions/batch``, ``/api/v1/transactions/end-batch`` or
            ``/api/v1/messages/batch``.
        field: the envelope's list field (``messages`` or ``ends``).
        items: the single operation's bodies.
        max_items: items per request, at least 1.

    Returns:
        per item: ``(status, body)`` or the item's ``HalfmoonError``. Raises nothing for a
        broker error.
    """
    if max_items < 1:
        raise ValueError("max_items must be at least 1")
    outcomes: list[BatchOutcome] = []
    for start in range(0, len(items), max_items):
        outcomes.extend(_batch_chunk(api, path, field, list(items[start : start + max_items])))
    return outcomes


def _batch_chunk(api: JsonApi, path: str, field: str, chunk: list[Any]) -> list[BatchOutcome]:
    """One batch request of ``chunk`` (split again if the broker finds it too big)."""
    try:
        _, answer = api.request("POST", path, json_body={field: chunk})
    except HalfmoonError as exc:
        if len(chunk) > 1 and exc.status_code == 413:
            middle = len(chunk) // 2
            return _batch_chunk(api, path, field, chunk[:middle]) + _batch_chunk(
                api, path, field, chunk[middle:]
            )
        limit = exc.details.get("max_messages")
        if exc.code == "batch_too_large" and isinstance(limit, int) and 1 <= limit < len(chunk):
            return batch_request(api, path, field, chunk, max_items=limit)
        return [exc.copy() for _ in chunk]
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list) or len(results) != len(chunk):
        error = HalfmoonError(
            f"POST {path} answered without one result per item ({len(chunk)} sent).",
            code="invalid_response",
            status_code=200,
        )
        return [error.copy() for _ in chunk]
    outcomes: list[BatchOutcome] = []
    for item in results:
        status = item.get("status") if isinstance(item, dict) else None
        if isinstance(status, int) and 200 <= status < 300 and "body" in item:
            outcomes.append((status, item["body"]))
        else:  # the item's error object; anything else is reported as http_<status>
            error = item.get("error") if isinstance(item, dict) else None
            code = status if isinstance(status, int) else 200
            outcomes.append(HalfmoonError.from_error_object(code, error))
    return outcomes


def transaction_end_batch(
    api: JsonApi, *, producer_group: str, ends: Sequence[TransactionEnd], max_items: int
) -> list[dict[str, Any] | HalfmoonError]:
    """``POST /api/v1/transactions/end-batch`` (many END_TRANSACTIONs, each as
    ``transaction_end`` would send it) in requests of at most ``max_items`` ends.

    Returns:
        per end, in order: the single end's answer (``{"transaction_id", "state", ...}``) or
        its ``HalfmoonError`` (404 unknown id, 403, 409 ``transaction_already_resolved``, or
        the whole request's error, see ``batch_request``).
    """
    bodies = [
        {
            "transaction_id": end.transaction_id,
            "producer_group": producer_group,
            "action": end.state.action,
            "from_transaction_check": end.from_transaction_check,
            "remark": end.remark,
        }
        for end in ends
    ]
    outcomes = batch_request(
        api, "/api/v1/transactions/end-batch", "ends", bodies, max_items=max_items
    )
    return [o if isinstance(o, HalfmoonError) else o[1] for o in outcomes]
