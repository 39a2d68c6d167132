"""The message search in Chromium (issue 25's first page): an operator finds a committed
transactional message by its key and sees where it stands with each consumer group, one
group having received and acked it, another not having received it yet."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.console_stack import ConsoleBroker, console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in

pytestmark = pytest.mark.e2e
expect.set_options(timeout=10_000)

PASSWORD = "messages-browser-pw"
TOPIC, GROUP, BILLING, SHIPPING = "OrderTopic", "orders", "billing", "shipping"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleBroker]:
    tmp = tmp_path_factory.mktemp("messages-browser")
    users = [("vera", "--role", "viewer", "--password", PASSWORD)]
    with console_broker(tmp, "messages", users=users) as running:
        running.topology(TOPIC, producer_groups=[GROUP], consumer_groups=[BILLING, SHIPPING])
        yield running


def test_a_committed_message_is_found_by_key_with_its_delivery_per_group(broker) -> None:
    assert broker.receive(SHIPPING, TOPIC) == []  # shipping consumes the topic: offsets at 0
    transaction_id = broker.send_half(GROUP, TOPIC, '{"order": 1234}', keys="ORDER-1234 EU")
    broker.end(transaction_id, GROUP, "commit")
    got = broker.receive(BILLING, TOPIC)
    assert [m["msg_id"] for m in got] == [transaction_id]
    broker.ack(BILLING, got)

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 900})
            console_sign_in(page, broker.url, "vera", PASSWORD)
            page.get_by_role("link", name="Messages", exact=True).click()
            expect(page).to_have_url(re.compile(r"/console/messages/$"))
            page.locator('input[name="key"]').fill("ORDER-1234")
            page.get_by_role("button", name="Search").click()

            results = page.locator("#message-results tbody tr")
            expect(results).to_have_count(2)  # the half message and its committed copy
            committed = results.filter(has_text="committed transactional message")
            expect(committed).to_contain_text(TOPIC)
            expect(results.locator("td:nth-child(2)")).to_have_text(
                ["committed transactional message", "half message"]  # newest first
            )
            shot(page, "messages-search")

            committed.get_by_role("link", name=transaction_id).click()
            expect(page.locator("h1")).to_contain_text(transaction_id)
            expect(page.locator("#message-transaction")).to_have_text(transaction_id)
            billing = page.locator(f'#message-deliveries tr[data-consumer-group="{BILLING}"]')
            shipping = page.locator(f'#message-deliveries tr[data-consumer-group="{SHIPPING}"]')
            expect(billing).to_have_attribute("data-state", "acked")
            expect(billing).to_contain_text("1 time")
            expect(shipping).to_have_attribute("data-state", "waiting")
            expect(shipping).to_contain_text("not received yet")
            expect(page.locator("pre.body")).to_contain_text('"order": 1234')
            shot(page, "messages-detail")

            page.locator("#message-transaction").click()
            expect(page.locator("#tx-state")).to_have_text("COMMITTED")
        finally:
            chromium.close()
