"""The operators' console in a real browser against real broker processes.

Debian's Chromium (``/usr/bin/chromium``, driven by Playwright's sync API) talks to uvicorn
(HTTP and the ``/ws/transactions/`` websocket), a Celery worker (bulk actions) and beat, started
on a PostgreSQL database of this module's own (``<test database>_browser``) and the tests' Redis
database (flushed first). Producers and consumers are played through the HTTP API with an admin
access key; console users are made with ``manage.py create_console_user``.

The stories of the issue: an operator signs in; a half message sent through the API appears in
the stuck list without a reload; its page shows the timeline; the operator commits it with a
reason; a consumer receives it; the action is in the audit log. A bulk rollback over a filter
previews N transactions, rolls back exactly those N (the live progress says when it is done),
and a transaction sent after the preview stays PREPARED. A viewer finds no action controls.

Every page visited is saved as a full-page PNG under ``var/screenshots/`` (test artifacts). No
sleeps: Playwright's ``expect`` waits for each state, with a timeout.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from tests.e2e.processes import (
    ROOT,
    Stack,
    broker_env,
    chromium_launch,
    console_sign_in,
    free_port,
    manage,
)
from tests.e2e.session import migrated_database, static_files

pytestmark = pytest.mark.e2e
expect.set_options(timeout=10_000)  # each state within 10 s: headroom on a loaded CI machine

SCREENSHOTS = ROOT / "var" / "screenshots"
PASSWORD = "console-browser-test-pw"
LIVE_TIMEOUT_MS = 5_000  # the issue asks for "within a second"; headroom for a loaded CI machine
BULK_TIMEOUT_MS = 30_000
IMMUNE_S = 3600  # the test's half messages are never back-checked while it runs
_names = itertools.count(1)


@dataclass
class Broker:
    """The running broker: its base URL, an API client with an admin access key, its processes."""

    url: str
    api: httpx.Client
    stack: Stack

    def send_half(self, group: str, topic: str, body: str, keys: str = "") -> str:
        """Store a half message through the API; returns its transaction id."""
        answer = self.api.post(
            "/api/v1/transactions",
            json={
                "producer_group": group,
                "topic": topic,
                "body": body,
                "keys": keys,
                "check_immunity_seconds": IMMUNE_S,
            },
        )
        assert answer.status_code == 201, answer.text
        return answer.json()["transaction_id"]

    def state(self, transaction_id: str) -> str:
        """The transaction's state read through the API."""
        answer = self.api.get(f"/api/v1/transactions/{transaction_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()["state"]

    def topology(self, label: str) -> tuple[str, str, str]:
        """A new topic, producer group (polling, no check_url) and consumer group, made through
        the API; returns their names."""
        n = next(_names)
        topic, group, consumer = f"{label}Topic{n}", f"{label}Group{n}", f"{label}Consumer{n}"
        for path, body in (
            ("/api/v1/topics", {"name": topic, "queue_nums": 2}),
            ("/api/v1/producer-groups", {"name": group, "check_url": None}),
            ("/api/v1/consumer-groups", {"name": consumer}),
        ):
            answer = self.api.post(path, json=body)
            assert answer.status_code == 201, answer.text
        return topic, group, consumer


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """uvicorn + Celery worker + beat on a fresh database, with an operator ``operator`` and a
    viewer ``viewer`` (password ``PASSWORD``) and an admin access key."""
    tmp = tmp_path_factory.mktemp("console-browser")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()  # no Celery task or channel message left by other tests
    name = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_browser"
    with migrated_database(name) as database_url:
        env = broker_env(database_url=database_url, redis_url=redis_url, var_dir=tmp / "var")
        static_files(tmp / "var")
        for role in ("operator", "viewer"):
            manage(env, "create_console_user", role, "--role", role, "--password", PASSWORD)
        token = manage(env, "create_access_key", "browser-admin", "--admin").split()[-1]
        stack = Stack(env, tmp)
        try:
            url = stack.start_broker(free_port())
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                yield Broker(url=url, api=api, stack=stack)
        finally:
            stack.stop()


@pytest.fixture(scope="module")
def browser(broker: Broker) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


def signed_in(browser: Browser, broker: Broker, role: str) -> Page:
    """A new browser context (its own cookies) signed in as the console user ``role``; returns
    its page. The sign-in page is saved as a screenshot on the way."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.goto(f"{broker.url}/")
    expect(page).to_have_url(re.compile(r"/console/login/"))
    shot(page, "sign-in")
    console_sign_in(page, broker.url, role, PASSWORD)
    expect(page).to_have_url(re.compile(r"/console/$"))
    return page


def shot(page: Page, name: str) -> None:
    """Save the full page as ``var/screenshots/<name>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def live(page: Page) -> None:
    """Wait until the page's websocket (static/console/live.js) is connected."""
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def row(page: Page, transaction_id: str) -> Locator:
    """The stuck list's row of a transaction."""
    return page.locator(f'tr[data-transaction-id="{transaction_id}"]')


def mark_no_reload(page: Page) -> None:
    """Put a flag on ``window`` that a reload or navigation would lose."""
    page.evaluate("window.__halfmoonNoReload = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__halfmoonNoReload === true"), "the page was reloaded"


def test_operator_sees_a_half_message_live_commits_it_and_finds_it_audited(
    broker: Broker, browser: Browser
) -> None:
    topic, group, consumer = broker.topology("Live")
    page = signed_in(browser, broker, "operator")

    page.goto(f"{broker.url}/console/transactions/")
    live(page)
    mark_no_reload(page)
    transaction_id = broker.send_half(group, topic, '{"order": 42}', keys="order-42")
    expect(row(page, transaction_id)).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(row(page, transaction_id)).to_contain_text(group)
    assert_not_reloaded(page)
    shot(page, "transactions")

    row(page, transaction_id).locator(f'a[href$="/transactions/{transaction_id}/"]').first.click()
    expect(page).to_have_url(re.compile(rf"/console/transactions/{transaction_id}/$"))
    expect(page.locator("#tx-state")).to_have_text("PREPARED")
    expect(page.locator("ol.timeline li").first).to_be_visible()
    expect(page.locator("pre.body")).to_contain_text('"order"')
    shot(page, "transaction")

    reason = "producer down, order 42 paid: commit by hand"
    page.get_by_role("button", name=re.compile(r"^commit", re.I)).first.click()
    dialog = page.locator("dialog[open]")
    expect(dialog).to_be_visible()
    dialog.locator('textarea[name="reason"]').fill(reason)
    shot(page, "transaction-commit-dialog")
    dialog.locator('[type="submit"]').first.click()
    expect(page.locator("#tx-state")).to_have_text("COMMITTED")
    expect(page.locator("ol.timeline")).to_contain_text(reason)
    shot(page, "transaction-committed")
    assert broker.state(transaction_id) == "COMMITTED"

    received = broker.api.post(
        f"/api/v1/consumer-groups/{consumer}/receive",
        json={"topic": topic, "max_messages": 32, "wait_ms": 5000},
    )
    assert received.status_code == 200, received.text
    assert [m["msg_id"] for m in received.json()["messages"]] == [transaction_id]

    page.goto(f"{broker.url}/console/audit/")
    audit = page.locator("main")
    expect(audit).to_contain_text(transaction_id)
    expect(audit).to_contain_text(reason)
    expect(audit).to_contain_text("operator")
    shot(page, "audit")

    for name, shown in (
        ("topics", topic),
        ("producer-groups", group),
        ("consumer-groups", consumer),
    ):
        page.goto(f"{broker.url}/console/{name}/")
        expect(page.locator("main")).to_contain_text(shown)
        shot(page, name)
    with page.expect_response(lambda answer: "/console/overview.json" in answer.url):
        page.goto(f"{broker.url}/console/")
    live(page)
    expect(page.locator("#tile-pending")).to_have_text(re.compile(r"^\d+$"))
    shot(page, "overview")
    page.context.close()


def test_bulk_rollback_over_a_filter_acts_on_the_previewed_set_only(
    broker: Broker, browser: Browser
) -> None:
    topic, group, _ = broker.topology("Bulk")
    previewed = [broker.send_half(group, topic, f"bulk {i}") for i in range(3)]
    page = signed_in(browser, broker, "operator")

    page.goto(f"{broker.url}/console/transactions/?group={group}")
    for transaction_id in previewed:
        expect(row(page, transaction_id)).to_be_visible()
    bulk = page.locator("form#bulk-form")
    bulk.locator('select[name="action"]').select_option("rollback")
    bulk.locator('textarea[name="reason"]').fill("bulk test rollback")
    bulk.locator('button[name="scope"][value="filter"]').click()

    expect(page).to_have_url(re.compile(r"/console/bulk/\d+/$"))
    preview = page.locator("main")
    expect(page.locator("#bulk-total")).to_have_text("3")
    for transaction_id in previewed:
        expect(preview).to_contain_text(transaction_id)
    shot(page, "bulk-preview")

    late = broker.send_half(group, topic, "sent after the preview")
    page.locator('form[action$="/apply/"] [type="submit"]').first.click()
    expect(page.locator("#bulk-progress")).to_be_visible()
    expect(page.locator("h1 .state")).to_have_text("done", timeout=BULK_TIMEOUT_MS)
    expect(page.locator("#bulk-done")).to_have_text("3")
    shot(page, "bulk-report")

    assert [broker.state(t) for t in previewed] == ["ROLLED_BACK"] * 3
    assert broker.state(late) == "PREPARED"
    expect(page.locator("main")).not_to_contain_text(late)
    page.context.close()


def test_a_viewer_finds_no_action_controls(broker: Broker, browser: Browser) -> None:
    topic, group, _ = broker.topology("View")
    transaction_id = broker.send_half(group, topic, "for the viewer")
    page = signed_in(browser, broker, "viewer")

    page.goto(f"{broker.url}/console/transactions/")
    expect(row(page, transaction_id)).to_be_visible()
    expect(page.locator("form#bulk-form")).to_have_count(0)
    expect(page.locator('input[name="transaction_id"]')).to_have_count(0)
    shot(page, "transactions-viewer")

    page.goto(f"{broker.url}/console/transactions/{transaction_id}/")
    expect(page.locator("main")).to_contain_text(transaction_id)
    actions = page.get_by_role(
        "button", name=re.compile(r"commit|roll ?back|resume|check now", re.I)
    )
    expect(actions).to_have_count(0)
    expect(page.locator(f'form[action*="/transactions/{transaction_id}/actions/"]')).to_have_count(
        0
    )
    shot(page, "transaction-viewer")
    page.context.close()
