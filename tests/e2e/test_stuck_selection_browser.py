"""The stuck list keeps the operator's ticked rows across its live reloads (Chromium): each open
of the page's websocket (a reconnect here) and each resume from a pause reloads the table with
htmx, and the rows ticked before it are still ticked after it, so "Export selected" and
"Preview on selected" act on exactly them (issue 37, point 10: they once came back unticked,
and the export answered that nothing was selected).

The reconnect is forced from the page: an init script keeps the page's WebSocket objects, the
test closes the live one, and static/console/live.js reconnects. The test waits for htmx's
``htmx:afterSettle`` of a new ``#tx-table`` (counted by the init script), never a sleep."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.e2e.console_stack import ConsoleBroker, console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in

pytestmark = pytest.mark.e2e
expect.set_options(timeout=15_000)

PASSWORD = "stuck-selection-pw"
TOPIC, GROUP = "SelectionTopic", "selection-producers"
RELOAD_TIMEOUT_MS = 20_000  # a reconnect waits 1 s (live.js), then the table's GET

# Runs before the page's scripts: keeps every WebSocket the page opens, and counts the table's
# reloads (an htmx swap that leaves a new #tx-table element).
WATCH = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); window.__sockets.push(this); }
  };
  window.__tableReloads = 0;
  let seen = null;
  document.addEventListener("htmx:afterSettle", () => {
    const table = document.getElementById("tx-table");
    if (table && table !== seen) { seen = table; window.__tableReloads += 1; }
  });
  document.addEventListener("DOMContentLoaded", () => {
    seen = document.getElementById("tx-table");
  });
})();
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleBroker]:
    tmp = tmp_path_factory.mktemp("stuck-selection-browser")
    users = [("sela", "--role", "operator", "--password", PASSWORD)]
    with console_broker(tmp, "stucksel", users=users) as running:
        running.topology(TOPIC, producer_groups=[GROUP])
        yield running


def reloads(page: Page) -> int:
    return page.evaluate("window.__tableReloads")


def wait_reload(page: Page, after: int) -> None:
    """Wait until the table has been reloaded more than ``after`` times."""
    page.wait_for_function("n => window.__tableReloads > n", arg=after, timeout=RELOAD_TIMEOUT_MS)


def box(page: Page, transaction_id: str):
    return page.locator(f'tr[data-transaction-id="{transaction_id}"] input[name="transaction_id"]')


def assert_ticked(page: Page, ticked: list[str], unticked: list[str]) -> None:
    """Right after a reload: the rows of ``ticked`` are ticked, those of ``unticked`` not."""
    now = {t: box(page, t).is_checked() for t in ticked + unticked}
    assert now == {t: t in ticked for t in ticked + unticked}, f"ticked after the reload: {now}"


def test_ticked_rows_survive_a_reconnect_and_a_resume(broker, tmp_path) -> None:
    ids = [broker.send_half(GROUP, TOPIC, f"order {n}", keys=f"SEL-{n}") for n in range(4)]
    ticked, unticked = [ids[0], ids[2]], [ids[1], ids[3]]

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            context = chromium.new_context(
                accept_downloads=True, viewport={"width": 1280, "height": 900}
            )
            page = context.new_page()
            console_sign_in(page, broker.url, "sela", PASSWORD)
            page.add_init_script(WATCH)
            page.goto(f"{broker.url}/console/transactions/?group={GROUP}")
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            wait_reload(page, 0)  # the first open's resync
            for transaction_id in ids:
                expect(box(page, transaction_id)).to_be_visible()
            for transaction_id in ticked:
                box(page, transaction_id).check()

            # The socket drops: live.js reconnects, and its resync reloads the table.
            before = reloads(page)
            page.evaluate("window.__sockets.at(-1).close()")
            wait_reload(page, before)
            expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
            assert page.evaluate("window.__sockets.length") == 2
            assert_ticked(page, ticked, unticked)

            # Pause and resume: the resume's resync reloads the table too.
            page.locator("#live-pause").click()
            before = reloads(page)
            page.locator("#live-pause").click()
            wait_reload(page, before)
            assert_ticked(page, ticked, unticked)
            shot(page, "stuck-selection-kept")

            with page.expect_download() as download_info:
                page.locator("#export-selected").click()
            path = tmp_path / "selection.zip"
            download_info.value.save_as(path)

            form = page.locator("form#bulk-form")
            form.locator('select[name="action"]').select_option("rollback")
            form.locator('textarea[name="reason"]').fill("rolled back after a reconnect")
            form.locator('button[name="scope"][value="selection"]').click()
            expect(page).to_have_url(re.compile(r"/console/bulk/\d+/$"))
            expect(page.locator("#bulk-total")).to_have_text("2")
            previewed = page.locator("main table.dense tbody tr td:nth-child(2)")
            expect(previewed).to_have_count(2)
            assert sorted(previewed.all_inner_texts()) == sorted(ticked)
            shot(page, "stuck-selection-preview")
            context.close()
        finally:
            chromium.close()

    with zipfile.ZipFile(path) as zf:
        exported = json.loads(zf.read("transactions.json"))
    assert sorted(t["transaction_id"] for t in exported) == sorted(ticked)
    assert [broker.state(t) for t in ids] == ["PREPARED"] * 4  # a preview changes nothing
