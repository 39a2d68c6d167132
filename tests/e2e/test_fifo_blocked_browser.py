"""A FIFO consumer group's blocked message group in a real browser, against real broker
processes (uvicorn, a Celery worker and beat on a database of this module's own,
``<test database>_fifoops``).

Consumer group ``ledger`` is FIFO; message group ``order-7`` holds three messages. A consumer
(the REST API) receives its head, gives it back (change of invisible duration to 0, a
PushConsumer's nack) and receives it again: attempt 2, the group blocked. Olga, an operator,
signs in in Debian's Chromium (Playwright's sync API), sees on the group's page that it is FIFO
and one message group is blocked, opens the blocked message groups, sends the head to the DLQ
with a reason; the list is then empty, the audit log shows her action and reason, and the
consumer receives the group's next message. The message group and the FIFO flag are set in the
database (this branch's send API has no ``message_group`` yet). Every page is saved under
``var/screenshots/``. No sleeps: Playwright's ``expect`` waits for each state.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.console_stack import console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in

pytestmark = pytest.mark.e2e
expect.set_options(timeout=15_000)

PASSWORD = "fifo-blocked-browser-pw"
TOPIC, GROUP, MESSAGE_GROUP = "FifoLedger", "ledger", "order-7"
REASON = "order 7 references a deleted account"


@dataclass
class Broker:
    url: str
    database_url: str
    admin: httpx.Client

    def sql(self, statement: str, *params: object) -> list[tuple]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def receive(self) -> list[dict]:
        answer = self.admin.post(
            f"/api/v1/consumer-groups/{GROUP}/receive",
            json={"topic": TOPIC, "max_messages": 1, "wait_ms": 0},
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["messages"]

    def nack(self, message: dict) -> None:
        answer = self.admin.post(
            f"/api/v1/consumer-groups/{GROUP}/change-invisible-duration",
            json={"receipt_handle": message["receipt_handle"], "invisible_duration_ms": 0},
        )
        assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("fifo-blocked")
    users = [("olga", "--role", "operator", "--password", PASSWORD)]
    with console_broker(tmp, "fifoops", users=users) as running:
        running.post("/api/v1/topics", {"name": TOPIC, "queue_nums": 1}, status=201)
        running.post(
            "/api/v1/consumer-groups", {"name": GROUP, "max_delivery_attempts": 16}, status=201
        )
        yield Broker(url=running.url, database_url=running.env["DATABASE_URL"], admin=running.api)


def test_a_blocked_head_is_sent_to_the_dlq_from_the_console(broker: Broker) -> None:
    # Marked FIFO before any request reads the group (the processes cache what they read).
    broker.sql("UPDATE broker_consumergroup SET fifo = true WHERE name = %s", GROUP)
    sent = []
    for i in range(3):
        answer = broker.admin.post(
            "/api/v1/messages", json={"topic": TOPIC, "body": f"entry {i}", "keys": f"o7-{i}"}
        )
        assert answer.status_code == 201, answer.text
        sent.append(answer.json()["msg_id"])
    broker.sql(
        "UPDATE broker_message SET message_group = %s WHERE topic = %s", MESSAGE_GROUP, TOPIC
    )
    [first] = broker.receive()
    broker.nack(first)
    [again] = broker.receive()
    assert again["msg_id"] == first["msg_id"] == sent[0] and again["delivery_attempt"] == 2

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
            console_sign_in(page, broker.url, "olga", PASSWORD)
            expect(page).to_have_url(re.compile(r"/console/$"))
            page.goto(f"{broker.url}/console/consumer-groups/{GROUP}/")
            expect(page.locator("#fifo-flag strong")).to_have_text("yes")
            expect(page.locator("#blocked-count")).to_have_text("1")
            shot(page, "fifo-group")
            page.locator("#blocked-summary").get_by_role("link", name=re.compile("blocked")).click()

            expect(page).to_have_url(re.compile(r"/blocked-message-groups/$"))
            row = page.locator(f'#blocked-message-groups tr[data-message-group="{MESSAGE_GROUP}"]')
            expect(row).to_contain_text(sent[0])
            expect(row).to_contain_text("2 of 16")
            expect(row.locator("td.num").last).to_have_text("2")  # waiting behind the head
            shot(page, "fifo-blocked")
            row.locator('input[name="reason"]').fill(REASON)
            row.get_by_role("button", name="Send head to DLQ").click()

            expect(page.locator("ul.messages")).to_contain_text("Sent to the DLQ")
            expect(page.locator("#blocked-total")).to_have_text("0")
            expect(page.locator("#blocked-message-groups")).to_contain_text(
                "No message group is blocked."
            )
            shot(page, "fifo-blocked-dead-lettered")

            page.goto(f"{broker.url}/console/audit/?action=dead-letter-head")
            entry = page.locator("tbody tr", has_text="dead-letter-head")
            expect(entry).to_have_count(1)
            expect(entry).to_contain_text(REASON)
            expect(entry).to_contain_text(sent[0])
            expect(entry).to_contain_text("olga")
            shot(page, "fifo-blocked-audit")
        finally:
            chromium.close()

    dead = broker.sql("SELECT msg_id FROM broker_message WHERE topic = %s", f"%DLQ%{GROUP}")
    assert dead == [(sent[0],)]
    [nxt] = broker.receive()
    assert nxt["msg_id"] == sent[1] and nxt["delivery_attempt"] == 1
