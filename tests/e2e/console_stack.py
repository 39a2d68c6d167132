"""A running broker for the console's browser tests: a fresh database and Redis db, migrated
(a copy of the session's template), its static files collected (once per session), console users made with ``create_console_user``, an admin access
key, and the quick start's processes (web, gRPC, Celery worker and beat: ``Stack``); and what
the tests do through its API (topology, half messages, ends, receives, acks) with that key."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import redis

from tests.e2e.processes import ROOT, Stack, broker_env, free_port, manage
from tests.e2e.session import migrated_database, static_files

if TYPE_CHECKING:  # Playwright is imported by the tests that drive a browser
    from playwright.sync_api import Page

SCREENSHOTS = ROOT / "var" / "screenshots"
IMMUNE_S = 3600  # a half message sent by these tests is never back-checked while they run


@dataclass
class ConsoleBroker:
    """The running broker: its base URL, an API client with an admin access key, its
    processes and their environment."""

    url: str
    api: httpx.Client
    stack: Stack
    env: dict[str, str]

    def post(self, path: str, body: Any = None, status: int | None = None) -> Any:
        """POST ``body`` to ``path`` with the admin key; asserts a 2xx answer (or ``status``)
        and returns its JSON (None for an empty body)."""
        answer = self.api.post(path, json=body)
        ok = answer.status_code == status if status else answer.is_success
        assert ok, f"POST {path}: {answer.status_code} {answer.text}"
        return answer.json() if answer.content else None

    def get(self, path: str, **params: Any) -> Any:
        answer = self.api.get(path, params=params)
        assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text}"
        return answer.json()

    def topology(
        self, topic: str, producer_groups: Sequence[str] = (), consumer_groups: Sequence[str] = ()
    ) -> None:
        """Create ``topic`` (2 queues), polling producer groups and consumer groups (at most 3
        delivery attempts)."""
        self.post("/api/v1/topics", {"name": topic, "queue_nums": 2})
        for group in producer_groups:
            self.post("/api/v1/producer-groups", {"name": group, "check_url": None})
        for group in consumer_groups:
            self.post("/api/v1/consumer-groups", {"name": group, "max_delivery_attempts": 3})

    def send_half(self, group: str, topic: str, body: str, keys: str = "") -> str:
        """Store a half message (never back-checked while the test runs); its transaction id."""
        sent = self.post(
            "/api/v1/transactions",
            {
                "producer_group": group,
                "topic": topic,
                "body": body,
                "keys": keys,
                "check_immunity_seconds": IMMUNE_S,
            },
        )
        return sent["transaction_id"]

    def end(self, transaction_id: str, group: str, action: str = "commit") -> dict[str, Any]:
        return self.post(
            f"/api/v1/transactions/{transaction_id}/end",
            {"producer_group": group, "action": action},
        )

    def state(self, transaction_id: str) -> str:
        return self.get(f"/api/v1/transactions/{transaction_id}")["state"]

    def receive(self, group: str, topic: str, invisible_ms: int = 30_000) -> list[dict[str, Any]]:
        """One receive of up to 32 messages for ``group`` (no wait)."""
        answer = self.post(
            f"/api/v1/consumer-groups/{group}/receive",
            {"topic": topic, "max_messages": 32, "invisible_duration_ms": invisible_ms},
        )
        return answer["messages"]

    def ack(self, group: str, messages: Sequence[dict[str, Any]]) -> None:
        self.post(
            f"/api/v1/consumer-groups/{group}/ack",
            {"receipt_handles": [m["receipt_handle"] for m in messages]},
        )


@contextmanager
def console_broker(
    tmp: Path,
    label: str,
    *,
    users: Sequence[Sequence[str]] = (),
    settings: dict | None = None,
    database_url: str | None = None,
) -> Iterator[ConsoleBroker]:
    """A broker started for one test module (see the module docstring); ``users`` are the
    argument lists of ``create_console_user`` (e.g. ``("ann", "--role", "viewer",
    "--password", "pw")``), ``settings`` extra environment. Its database is ``database_url``
    (an empty database, e.g. on a ``tests.e2e.services.PrivatePostgres`` the test stops and
    starts) or else one on the tests' server named after ``HALFMOON_TEST_DATABASE`` and
    ``label``; its Redis db is ``REDIS_URL``'s, emptied first."""
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()
    name = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + f"_{label}"
    given = database_url
    with nullcontext(given) if given else migrated_database(name) as database_url:
        env = broker_env(
            database_url=database_url, redis_url=redis_url, var_dir=tmp / "var", settings=settings
        )
        if given:  # an empty database; the session's template is on the tests' server
            manage(env, "migrate", "--noinput", "-v", "0")
        static_files(tmp / "var")
        for args in users:
            manage(env, "create_console_user", *args)
        token = manage(env, "create_access_key", f"{label}-admin", "--admin").split()[-1]
        stack = Stack(env, tmp)
        try:
            url = stack.start_broker(free_port())
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                yield ConsoleBroker(url=url, api=api, stack=stack, env=env)
        finally:
            stack.stop()


def shot(page: Page, name: str) -> None:
    """A full-page screenshot ``var/screenshots/<name>.png`` (kept by CI for a reader)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
