"""The stuck list fits a 1,400-pixel-wide window: its last column ("Why stuck") is on screen,
or inside a container that scrolls to it, never cut off by the page.

Chromium (``/usr/bin/chromium`` through Playwright, ``--no-sandbox --disable-gpu``) against the
broker of ``tests/e2e/test_console_browser.py`` (its fixtures, a broker of this module's own),
with stuck rows whose cells are as wide as real ones get: a long producer group, topic, tags
and keys, a PREPARED and a DISCARDED transaction. The page is saved as
``var/screenshots/transactions-1400.png``.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.processes import console_sign_in
from tests.e2e.test_console_browser import PASSWORD, Broker, broker, browser, shot

__all__ = ["broker", "browser"]  # the fixtures, used here by name

pytestmark = pytest.mark.e2e

WIDTH, HEIGHT = 1400, 900
NARROW = 900  # narrower than the table can be: then its box scrolls, not the page
# The last header cell's right edge, and the box that may scroll to it (its nearest ancestor
# that scrolls horizontally: overflow-x auto or scroll), before and after scrolling that box
# as far right as it goes.
LAST_HEADER_GEOMETRY = """
() => {
  const cell = document.querySelector("#tx-table thead th:last-child");
  let box = cell.parentElement;
  while (box && box !== document.body) {
    const overflow = getComputedStyle(box).overflowX;
    if (overflow === "auto" || overflow === "scroll") break;
    box = box.parentElement;
  }
  const scroller = box && box !== document.body ? box : null;
  const before = cell.getBoundingClientRect().right;
  if (scroller) scroller.scrollLeft = scroller.scrollWidth;
  const after = cell.getBoundingClientRect().right;
  if (scroller) scroller.scrollLeft = 0;
  return {
    text: cell.textContent.trim(),
    right: before,
    rightScrolled: after,
    viewport: document.documentElement.clientWidth,
    pageScrollWidth: document.documentElement.scrollWidth,
    boxRight: scroller ? scroller.getBoundingClientRect().right : null,
    boxScrolls: scroller ? scroller.scrollWidth > scroller.clientWidth : false,
  };
}
"""


def test_the_stuck_lists_last_column_is_on_screen_at_1400_pixels(
    broker: Broker, browser: Browser
) -> None:
    # Names as long as the demo's (demo_producer_<run>) and longer, keys cut at 60 characters.
    topic, group, _ = broker.topology("WideLayoutWithALongNameForTheStuckList")
    keys = "order-2026-11-27-000123456789,customer-9f8e7d6c5b4a,invoice-INV-0000042"
    broker.send_half(group, topic, "wide row", keys=keys)
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        console_sign_in(page, broker.url, "operator", PASSWORD)
        page.goto(f"{broker.url}/console/transactions/?group={group}")
        expect(page.locator("#tx-tbody tr.tx-row")).to_have_count(1)
        expect(page.locator("#tx-table thead th").last).to_have_text(re.compile("Why stuck"))
        shot(page, "transactions-1400")

        wide = page.evaluate(LAST_HEADER_GEOMETRY)
        page.set_viewport_size({"width": NARROW, "height": HEIGHT})
        narrow = page.evaluate(LAST_HEADER_GEOMETRY)

        assert wide["text"] == "Why stuck", wide
        # At 1,400 pixels the whole table fits: the last column is on screen as the page opens.
        assert not wide["boxScrolls"], wide
        assert wide["right"] <= wide["viewport"], wide
        # Narrower, the table scrolls inside its box, which can bring the last column in;
        # the page itself never scrolls sideways.
        for geometry in (wide, narrow):
            assert geometry["pageScrollWidth"] <= geometry["viewport"], geometry
        assert narrow["boxScrolls"] and narrow["boxRight"] <= narrow["viewport"], narrow
        assert narrow["right"] > narrow["boxRight"], narrow  # out of view until scrolled
        assert narrow["rightScrolled"] <= narrow["boxRight"] + 0.5, narrow
    finally:
        context.close()
