"""The alerts' webhooks: signed POSTs to receivers, guarded by the check-target rule.

More: docs/design.md, "Module notes", broker/services/alerts/webhooks.py."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
from halfmoon_client.signing import SIGNATURE_HEADER, sign_check_body

from broker.conf import conf
from broker.errors import InvalidInput
from broker.plumbing.pinned_transport import PinnedTransport
from broker.rules.check_targets import AllowedTargets
from broker.services.checks.targets import (
    allowed_targets_setting,
    broker_endpoint,
    target_url_refusal,
)

SETTING = "HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS"

CONCURRENCY = 16
"""Webhooks in flight at once per delivery pass."""

USER_AGENT = "halfmoon-alerts"


def webhook_allowed_targets() -> AllowedTargets:
    """``HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS`` parsed (subject "webhook" in refusals)."""
    return allowed_targets_setting(SETTING, subject="webhook")


def webhook_url_validate(url: str) -> None:
    """Check a receiver's webhook URL before it is stored (see the module docstring).

    Raises:
        InvalidInput: ``webhook_url_not_allowed``, ``details``: ``field`` ("url"), ``url``,
            ``rule`` (``scheme``, ``link_local``, ``multicast``, ``unspecified``,
            ``broker_itself``, ``not_allowed``, ``unresolved``, ``malformed``).
    """
    refusal = target_url_refusal(
        url, allowed=webhook_allowed_targets(), resolve_timeout_ms=conf.alert_notify_timeout_ms
    )
    if refusal is not None:
        raise InvalidInput(
            f"url refused ({refusal.rule}): {refusal.message}",
            code="webhook_url_not_allowed",
            details={"field": "url", "url": url, "rule": refusal.rule},
        )


@dataclass(frozen=True)
class Webhook:
    """One POST to make: ``url``, the JSON ``body``, signed with ``secret``; ``key`` names it
    in the result (the notification's id)."""

    key: int
    url: str
    secret: str
    body: dict[str, Any]

    @property
    def raw(self) -> bytes:
        """The body exactly as sent (compact JSON, UTF-8)."""
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class WebhookResult:
    """What became of one webhook: ``error`` "" when the receiver answered 2xx, else why
    not (the HTTP status and the start of its answer, or the connection's error)."""

    key: int
    error: str
    status_code: int | None = None


async def _send(
    client: httpx.AsyncClient, hook: Webhook, limit: asyncio.Semaphore
) -> WebhookResult:
    raw = hook.raw
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        SIGNATURE_HEADER: sign_check_body(hook.secret, raw),
    }
    async with limit:
        try:
            response = await client.post(hook.url, content=raw, headers=headers)
        except httpx.HTTPError as exc:
            return WebhookResult(
                hook.key, f"{type(exc).__name__}: {exc}"[:1024] or type(exc).__name__
            )
    if 200 <= response.status_code < 300:
        return WebhookResult(hook.key, "", response.status_code)
    return WebhookResult(
        hook.key, f"HTTP {response.status_code}: {response.text[:200]}", response.status_code
    )


async def _send_all(hooks: list[Webhook]) -> list[WebhookResult]:
    limit = asyncio.Semaphore(CONCURRENCY)
    transport = PinnedTransport(
        allowed=webhook_allowed_targets(),
        broker=broker_endpoint(),
        resolve_timeout_s=conf.alert_notify_timeout_ms / 1000,
    )
    async with httpx.AsyncClient(
        timeout=conf.alert_notify_timeout_ms / 1000,
        follow_redirects=False,
        trust_env=False,
        transport=transport,
    ) as client:
        return list(await asyncio.gather(*(_send(client, hook, limit) for hook in hooks)))


def webhooks_send(hooks: list[Webhook]) -> list[WebhookResult]:
    """POST every webhook in parallel (at most ``CONCURRENCY`` at once), each with
    HALFMOON_ALERT_NOTIFY_TIMEOUT_MS to connect and to read, through the pinned transport.
    Returns one result per webhook, in order; never raises an httpx error. Never call inside a
    database transaction."""
    if not hooks:
        return []
    return asyncio.run(_send_all(hooks))
