"""The incident export in Chromium: an operator selects one transaction on the stuck list,
exports the selection, and the downloaded zip holds that transaction's timeline (and nothing of
the transaction left unselected)."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.console_stack import ConsoleBroker, console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in

pytestmark = pytest.mark.e2e
expect.set_options(timeout=10_000)

PASSWORD = "export-browser-pw"
TOPIC, GROUP = "IncidentTopic", "incidents"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleBroker]:
    tmp = tmp_path_factory.mktemp("export-browser")
    users = [("otto", "--role", "operator", "--password", PASSWORD)]
    with console_broker(tmp, "export", users=users) as running:
        running.topology(TOPIC, producer_groups=[GROUP])
        yield running


def test_an_export_downloads_the_timeline_of_a_selected_transaction(broker, tmp_path) -> None:
    chosen = broker.send_half(GROUP, TOPIC, "refund 77", keys="REFUND-77")
    other = broker.send_half(GROUP, TOPIC, "refund 78", keys="REFUND-78")
    broker.post(f"/api/v1/transactions/{chosen}/check-now", {"reason": "checked at 3 a.m."})

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            context = chromium.new_context(
                accept_downloads=True, viewport={"width": 1280, "height": 900}
            )
            page = context.new_page()
            console_sign_in(page, broker.url, "otto", PASSWORD)
            page.goto(f"{broker.url}/console/transactions/")
            row = page.locator(f'tr[data-transaction-id="{chosen}"]')
            expect(row).to_be_visible()
            expect(page.locator(f'tr[data-transaction-id="{other}"]')).to_be_visible()
            row.locator('input[name="transaction_id"]').check()
            shot(page, "export-selected")
            with page.expect_download() as download_info:
                page.locator("#export-selected").click()
            download = download_info.value
            assert re.fullmatch(
                r"halfmoon-incident-selection-\d{8}T\d{6}Z\.zip", download.suggested_filename
            )
            path = tmp_path / download.suggested_filename
            download.save_as(path)
            context.close()
        finally:
            chromium.close()

    with zipfile.ZipFile(path) as zf:
        timeline = json.loads(zf.read("timeline.json"))
        transactions = json.loads(zf.read("transactions.json"))
        audit = json.loads(zf.read("audit.json"))
        assert "README.txt" in zf.namelist() and "timeline.csv" in zf.namelist()
    assert [t["transaction_id"] for t in transactions] == [chosen]
    assert {e["transaction_id"] for e in timeline} == {chosen}
    kinds = [e["kind"] for e in timeline]
    assert kinds[0] == "half_stored"
    assert "check_requested" in kinds
    assert [a["reason"] for a in audit] == ["checked at 3 a.m."]
