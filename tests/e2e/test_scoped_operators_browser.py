"""An operator scoped to groups in a real browser, against real broker processes.

uvicorn, a Celery worker and beat run on a database of this module's own
(``<test database>_scoped``). Paula is made with ``manage.py create_console_user paula --role
operator --producer-group <payments>``, and the payments team's access key with ``manage.py
create_access_key --operator-producer-group <payments>``. In Debian's Chromium (Playwright's
sync API) Paula signs in, finds a stuck transaction of her group, commits it with a reason, and
finds no action control on another group's transaction nor a checkbox for it in the stuck
list; the payments key's resolve of that other transaction answers 403 in the contract's error
body, while its resolve of one of its own answers 200.

Every page visited is saved as a full-page PNG under ``var/screenshots/``. No sleeps:
Playwright's ``expect`` waits for each state.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.console_stack import console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in, manage

pytestmark = pytest.mark.e2e
expect.set_options(timeout=10_000)

PASSWORD = "scoped-operator-browser-pw"
IMMUNE_S = 3600  # never back-checked while the test runs
TOPIC, PAYMENTS, ORDERS = "ScopedTopic", "payments", "orders"


@dataclass
class Broker:
    url: str
    admin: httpx.Client
    payments_key: httpx.Client

    def send_half(self, group: str, body: str) -> str:
        answer = self.admin.post(
            "/api/v1/transactions",
            json={
                "producer_group": group,
                "topic": TOPIC,
                "body": body,
                "check_immunity_seconds": IMMUNE_S,
            },
        )
        assert answer.status_code == 201, answer.text
        return answer.json()["transaction_id"]

    def state(self, transaction_id: str) -> str:
        answer = self.admin.get(f"/api/v1/transactions/{transaction_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()["state"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("scoped-operators")
    users = [("paula", "--role", "operator", "--producer-group", PAYMENTS, "--password", PASSWORD)]
    with console_broker(tmp, "scoped", users=users) as running:
        payments_token = manage(
            running.env, "create_access_key", "payments-ops", "--operator-producer-group", PAYMENTS
        ).split()[-1]
        headers = {"Authorization": f"Bearer {payments_token}"}
        with httpx.Client(base_url=running.url, headers=headers, timeout=30) as payments_key:
            running.post("/api/v1/topics", {"name": TOPIC, "queue_nums": 2}, status=201)
            for group in (PAYMENTS, ORDERS):
                running.post(
                    "/api/v1/producer-groups", {"name": group, "check_url": None}, status=201
                )
            yield Broker(url=running.url, admin=running.api, payments_key=payments_key)


def test_a_group_scoped_operator_acts_on_her_group_only(broker: Broker) -> None:
    mine = broker.send_half(PAYMENTS, "payment 7 settled")
    theirs = broker.send_half(ORDERS, "order 9")

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            context = chromium.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            console_sign_in(page, broker.url, "paula", PASSWORD)
            expect(page).to_have_url(re.compile(r"/console/$"))
            expect(page.locator("#operator-of")).to_contain_text("producer group payments")

            # The stuck list: both rows, a checkbox on hers only.
            page.goto(f"{broker.url}/console/transactions/")
            mine_row = page.locator(f'tr[data-transaction-id="{mine}"]')
            theirs_row = page.locator(f'tr[data-transaction-id="{theirs}"]')
            expect(mine_row).to_be_visible()
            expect(theirs_row).to_be_visible()
            expect(mine_row.locator('input[name="transaction_id"]')).to_have_count(1)
            expect(theirs_row.locator('input[name="transaction_id"]')).to_have_count(0)
            expect(page.locator("#operator-scope")).to_contain_text("producer group payments")
            shot(page, "scoped-transactions")

            # Another group's transaction: everything to see, nothing to press.
            page.goto(f"{broker.url}/console/transactions/{theirs}/")
            expect(page.locator("#tx-state")).to_have_text("PREPARED")
            expect(page.locator("ol.timeline li").first).to_be_visible()
            expect(page.locator("#no-actions")).to_contain_text("producer group orders")
            expect(page.locator("section.actions")).to_have_count(0)
            expect(page.locator("dialog")).to_have_count(0)
            shot(page, "scoped-other-group")

            # Her group's transaction: commit it with a reason.
            page.goto(f"{broker.url}/console/transactions/{mine}/")
            expect(page.locator("#tx-state")).to_have_text("PREPARED")
            page.get_by_role("button", name=re.compile(r"^commit", re.I)).first.click()
            dialog = page.locator("dialog[open]")
            expect(dialog).to_be_visible()
            reason = "payments: settled with the bank, commit by hand"
            dialog.locator('textarea[name="reason"]').fill(reason)
            dialog.locator('[type="submit"]').first.click()
            expect(page.locator("#tx-state")).to_have_text("COMMITTED")
            expect(page.locator("ol.timeline")).to_contain_text(reason)
            expect(page.locator("ol.timeline")).to_contain_text("console:paula")
            shot(page, "scoped-committed")
            context.close()
        finally:
            chromium.close()

    assert broker.state(mine) == "COMMITTED"
    assert broker.state(theirs) == "PREPARED"

    # The payments team's access key: 403 on the other group's transaction, 200 on its own.
    refused = broker.payments_key.post(
        f"/api/v1/transactions/{theirs}/resolve", json={"action": "rollback", "reason": "not ours"}
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "permission_denied"
    assert refused.json()["error"]["details"] == {"producer_group": ORDERS}
    assert broker.state(theirs) == "PREPARED"
    own = broker.send_half(PAYMENTS, "payment 8")
    done = broker.payments_key.post(
        f"/api/v1/transactions/{own}/resolve", json={"action": "rollback", "reason": "refunded"}
    )
    assert done.status_code == 200, done.text
    assert done.json()["state"] == "ROLLED_BACK"
