"""Poll mode of back-checks: a producer whose group has no ``check_url`` long-polls
``GET /api/v1/producer-groups/{name}/check-requests`` and answers each request through
``end`` with ``"from_transaction_check": true`` (api-v1)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from halfmoon_client.errors import HalfmoonError
from halfmoon_client.messages import MessageView
from halfmoon_client.states import LocalTransactionState
from halfmoon_client.transport import JsonApi, path_segment, transaction_end

logger = logging.getLogger("halfmoon.client")

MAX_RETRY_DELAY_S = 5.0
"""Longest pause after failed polls (seconds); the pause doubles from 0.4 s up to this."""


class CheckPoller(threading.Thread):
    """A daemon thread that long-polls a producer group's check requests until ``stop()``.

    Args:
        api: a ``JsonApi`` of its own (a long poll holds its connection).
        producer_group: the group whose check requests are polled.
        wait_ms: ``wait_ms`` of each long poll (0-30000).
        answer: asks the listener about one back-check.

    A failed poll is logged and retried after 0.4, 0.8, ... up to 5 s; the API is closed when
    the thread ends.
    """

    def __init__(
        self,
        api: JsonApi,
        *,
        producer_group: str,
        wait_ms: int,
        answer: Callable[[MessageView], LocalTransactionState],
    ) -> None:
        super().__init__(name=f"halfmoon-check-poll-{producer_group}", daemon=True)
        self.api = api
        self.producer_group = producer_group
        self.wait_ms = wait_ms
        self.answer = answer
        self._stop_event = threading.Event()

    def stop(self, timeout_s: float | None = None) -> None:
        """Ask the loop to end and wait up to ``timeout_s`` for the current poll to return."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=timeout_s)

    def run(self) -> None:
        path = f"/api/v1/producer-groups/{path_segment(self.producer_group)}/check-requests"
        failures = 0
        try:
            while not self._stop_event.is_set():
                try:
                    _, out = self.api.request(
                        "GET",
                        path,
                        params={"wait_ms": self.wait_ms},
                        timeout_s=self.wait_ms / 1000 + self.api.timeout_s,
                    )
                    failures = 0
                except HalfmoonError as exc:
                    failures += 1
                    delay = min(MAX_RETRY_DELAY_S, 0.2 * 2 ** min(failures, 5))
                    logger.warning(
                        "polling check requests failed (retry in %.1f s): %s", delay, exc
                    )
                    self._stop_event.wait(delay)
                    continue
                for request in (out or {}).get("check_requests", []):
                    self._answer_one(request)
        finally:
            self.api.close()

    def _answer_one(self, request: Mapping[str, Any]) -> None:
        try:
            view = MessageView.from_json(request)
        except (KeyError, ValueError, TypeError):
            logger.warning("malformed check request: %r", request)
            return
        state = self.answer(view)
        transaction_id = view.transaction_id or view.msg_id
        try:
            transaction_end(
                self.api,
                producer_group=self.producer_group,
                transaction_id=transaction_id,
                state=state,
                from_transaction_check=True,
                remark=None,
            )
        except HalfmoonError as exc:
            logger.warning("answering the check of %s failed: %s", transaction_id, exc)
