"""Consumer-group operations in a real browser, against real broker processes.

uvicorn, a Celery worker and beat run on a database of this module's own
(``<test database>_cgops``). Olga, an operator, signs in in Debian's Chromium (Playwright's sync
API) and:

- resets consumer group ``billing``'s offsets to a time: the preview says N (the messages
  stored at or after it, which the group has received and acked), she applies it with a
  reason, and a consumer (the REST receive API) receives exactly those N again, as attempt 1,
  and nothing else;
- resends a dead letter of consumer group ``fragile`` from its dead-letter queue: a frozen set
  previewed and confirmed, run by the Celery worker with live progress; the group then
  receives the original message again.

The messages' store times are set in the database before the reset (the history the reset
reads), so the time to reset to is exact to the second the form takes. Every page is saved as a
full-page PNG under ``var/screenshots/``. No sleeps: Playwright's ``expect`` waits for each
state.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.console_stack import console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in

pytestmark = pytest.mark.e2e
expect.set_options(timeout=15_000)

PASSWORD = "consumer-group-ops-browser-pw"
TOPIC, DLQ_TEST_TOPIC = "CgOpsTopic", "CgOpsPoison"
BILLING, FRAGILE = "billing", "fragile"
BASE = 1_790_000_000_000  # a whole second: 2026-09-21T...Z
LATER = BASE + 600_000  # the time reset to


@dataclass
class Broker:
    url: str
    database_url: str
    admin: httpx.Client

    def send(self, body: str, topic: str = TOPIC) -> str:
        answer = self.admin.post("/api/v1/messages", json={"topic": topic, "body": body})
        assert answer.status_code == 201, answer.text
        return answer.json()["msg_id"]

    def receive(self, group: str, topic: str = TOPIC) -> list[dict]:
        answer = self.admin.post(
            f"/api/v1/consumer-groups/{group}/receive",
            json={"topic": topic, "max_messages": 32, "wait_ms": 0},
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["messages"]

    def ack(self, group: str, messages: list[dict]) -> None:
        handles = [m["receipt_handle"] for m in messages]
        answer = self.admin.post(
            f"/api/v1/consumer-groups/{group}/ack", json={"receipt_handles": handles}
        )
        assert answer.status_code == 200 and answer.json()["acked"] == len(handles), answer.text

    def consume_all(self, group: str) -> list[dict]:
        """Receive and ack until a receive answers nothing."""
        out: list[dict] = []
        while batch := self.receive(group):
            self.ack(group, batch)
            out.extend(batch)
        return out

    def store_at(self, msg_ids: list[str], start: int) -> None:
        """Set the messages' store times one second apart from ``start`` (ms)."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            for i, msg_id in enumerate(msg_ids):
                conn.execute(
                    "UPDATE broker_message SET store_timestamp = %s WHERE msg_id = %s "
                    "AND topic = %s",
                    (start + i * 1000, msg_id, TOPIC),
                )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("consumer-group-ops")
    users = [("olga", "--role", "operator", "--password", PASSWORD)]
    with console_broker(tmp, "cgops", users=users) as running:
        for path, body in (
            ("/api/v1/topics", {"name": TOPIC, "queue_nums": 2}),
            ("/api/v1/topics", {"name": DLQ_TEST_TOPIC, "queue_nums": 1}),
            ("/api/v1/consumer-groups", {"name": BILLING}),
            ("/api/v1/consumer-groups", {"name": FRAGILE, "max_delivery_attempts": 1}),
        ):
            running.post(path, body, status=201)
        yield Broker(url=running.url, database_url=running.env["DATABASE_URL"], admin=running.api)


def _signed_in(playwright, broker: Broker):
    chromium = chromium_launch(playwright)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    console_sign_in(page, broker.url, "olga", PASSWORD)
    expect(page).to_have_url(re.compile(r"/console/$"))
    return chromium, page


def test_a_reset_to_a_time_redelivers_exactly_the_previewed_messages(broker: Broker) -> None:
    earlier = [broker.send(f"earlier {i}") for i in range(5)]
    later = [broker.send(f"later {i}") for i in range(3)]
    assert len(broker.consume_all(BILLING)) == 8  # received and acked once
    broker.store_at(earlier, BASE)
    broker.store_at(later, LATER)
    at = datetime.fromtimestamp(LATER / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")

    with sync_playwright() as playwright:
        chromium, page = _signed_in(playwright, broker)
        try:
            page.goto(f"{broker.url}/console/consumer-groups/")
            page.get_by_role("link", name=BILLING, exact=True).click()
            expect(page.locator("h1")).to_contain_text(BILLING)
            expect(page.locator("#total-lag")).to_have_text("0")
            page.locator('#reset-form input[name="at"]').fill(at)
            shot(page, "cgops-group")
            page.locator("#reset-form").get_by_role("button", name="Preview reset").click()

            expect(page).to_have_url(re.compile(r"/offset-resets/\d+/$"))
            expect(page.locator("#redeliver-count")).to_have_text(str(len(later)))
            expect(page.locator("#skip-count")).to_have_text("0")
            shot(page, "cgops-reset-preview")
            page.locator('#apply-form input[name="reason"]').fill("billing lost the last batch")
            page.locator("#apply-form").get_by_role("button", name="Apply").click()
            expect(page.locator("#reset-result")).to_have_text("3 delivered again, 0 skipped")
            expect(page.locator("h1 .state")).to_have_text("done")
            shot(page, "cgops-reset-applied")
        finally:
            chromium.close()

    again = broker.consume_all(BILLING)
    assert sorted(m["msg_id"] for m in again) == sorted(later)
    assert {m["delivery_attempt"] for m in again} == {1}
    assert broker.receive(BILLING) == []


def test_a_dead_letter_is_resent_from_the_console_and_received_again(broker: Broker) -> None:
    msg_id = broker.send("poison pill", DLQ_TEST_TOPIC)
    [received] = broker.receive(FRAGILE, DLQ_TEST_TOPIC)
    assert received["msg_id"] == msg_id
    dead = broker.admin.post(
        f"/api/v1/consumer-groups/{FRAGILE}/dead-letter",
        json={"receipt_handle": received["receipt_handle"]},
    )
    assert dead.status_code == 204, dead.text
    assert broker.receive(FRAGILE, DLQ_TEST_TOPIC) == []

    with sync_playwright() as playwright:
        chromium, page = _signed_in(playwright, broker)
        try:
            page.goto(f"{broker.url}/console/consumer-groups/{FRAGILE}/")
            rows = page.locator("#dead-letters tbody tr[data-dead-letter]")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text(msg_id)
            shot(page, "cgops-dead-letters")
            page.locator("#dlq-all-form").get_by_role("button").click()

            expect(page).to_have_url(re.compile(r"/dead-letter-resends/\d+/$"))
            expect(page.locator("#bulk-total")).to_have_text("1")
            page.locator('#apply-form input[name="reason"]').fill("consumer fixed, replay")
            page.locator("#apply-form").get_by_role("button").click()
            # The worker runs it; the page follows its progress and shows the report.
            expect(page.locator("#bulk-progress")).to_have_attribute("data-state", "done")
            expect(page.locator("#bulk-done")).to_have_text("1")
            expect(page.locator("#targets tbody tr.result-done")).to_have_count(1)
            shot(page, "cgops-dead-letters-resent")
        finally:
            chromium.close()

    [again] = broker.receive(FRAGILE, DLQ_TEST_TOPIC)
    assert again["msg_id"] == msg_id and again["delivery_attempt"] == 1
    assert again["topic"] == DLQ_TEST_TOPIC
