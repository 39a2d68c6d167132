"""A transaction's page after a live update (Chromium): the event of a check replaces the page's
content, and the operator's action buttons still open their dialogs (they once lost their
handlers with the content they were bound to, leaving "Commit…" dead until a reload)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.console_stack import ConsoleBroker, console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in

pytestmark = pytest.mark.e2e
expect.set_options(timeout=15_000)

PASSWORD = "live-page-browser-pw"
TOPIC, GROUP = "LiveTopic", "live-producers"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleBroker]:
    tmp = tmp_path_factory.mktemp("live-page-browser")
    users = [("lena", "--role", "operator", "--password", PASSWORD)]
    with console_broker(tmp, "livepage", users=users) as running:
        running.topology(TOPIC, producer_groups=[GROUP])
        yield running


def test_the_action_buttons_work_after_a_live_update(broker) -> None:
    transaction_id = broker.send_half(GROUP, TOPIC, "order 5")

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 900})
            console_sign_in(page, broker.url, "lena", PASSWORD)
            page.goto(f"{broker.url}/console/transactions/{transaction_id}/")
            expect(page.locator("#tx-state")).to_have_text("PREPARED")
            before = page.locator("#tx-detail").get_attribute("data-version")
            # An operator elsewhere asks for a check: the event reloads this page's content.
            broker.post(f"/api/v1/transactions/{transaction_id}/check-now", {"reason": "now"})
            expect(page.locator("ol.timeline")).to_contain_text("now")
            assert page.locator("#tx-detail").get_attribute("data-version") != before

            page.get_by_role("button", name="Commit…").click()
            dialog = page.locator("dialog[open]")
            expect(dialog).to_be_visible()
            dialog.locator('textarea[name="reason"]').fill("settled after the live update")
            dialog.locator('[type="submit"]').first.click()
            expect(page.locator("#tx-state")).to_have_text("COMMITTED")
            shot(page, "live-page-committed")
        finally:
            chromium.close()

    assert broker.state(transaction_id) == "COMMITTED"
