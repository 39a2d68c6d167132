"""The console's "why the next check happens when it does" against the real scan.

uvicorn, a Celery worker and beat run with a back-check scan every ``SCAN_MS``; a producer
group's check URL is a local server answering UNKNOW to every check. An operator opens a half
message's page in Debian's Chromium and reads the predicted time of its next check (the panel's
``<time data-timestamp>``): the first check waits for the message's check immunity, the next
for the check interval. Each time, the scan's check (the ``check_sent`` entry of the
transaction's timeline, read through the API) comes no earlier than predicted and within one
scan interval after it (plus ``DISPATCH_MS``, the scan task's way from beat to a worker). No sleeps: the page and the timeline are polled with deadlines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from playwright.sync_api import Page, expect, sync_playwright

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
from tests.support import answer_state, check_server_running

pytestmark = pytest.mark.e2e

SCAN_MS = 2_000  # HALFMOON_CHECK_SCAN_INTERVAL_MS (beat, whole seconds)
CHECK_INTERVAL_MS = 4_000
DISPATCH_MS = 1_000
"""How late a scan may start after its beat tick: beat's task crossing Redis to a worker that
may be busy with another periodic task on a loaded machine (measured: tens of ms when idle)."""
IMMUNITY_S = 8  # time to open the page before the first check is due
SETTINGS = {
    "HALFMOON_CHECK_SCAN_INTERVAL_MS": str(SCAN_MS),
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": str(CHECK_INTERVAL_MS),
}
PASSWORD = "check-explanation-browser-pw"
SCREENSHOTS = ROOT / "var" / "screenshots"
WAIT_S = 60


def _checks(api: httpx.Client, transaction_id: str) -> list[int]:
    """The times (ms) of the transaction's delivered checks, oldest first (its timeline)."""
    answer = api.get(f"/api/v1/transactions/{transaction_id}/timeline")
    assert answer.status_code == 200, answer.text
    return [e["timestamp"] for e in answer.json()["timeline"] if e["kind"] == "check_sent"]


def _checks_awaited(api: httpx.Client, transaction_id: str, count: int) -> list[int]:
    """The check times once there are at least ``count`` of them (a deadline of ``WAIT_S``)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        checks = _checks(api, transaction_id)
        if len(checks) >= count:
            return checks
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} checks of {transaction_id} after {WAIT_S} s")


def _predicted(page: Page, url: str, after: int = 0) -> int:
    """Open the transaction page at ``url`` and return the predicted time (ms) of its next
    check, reloading (until a deadline of ``WAIT_S``) while it is not after ``after`` (ms):
    the page was served before the last check was journalled."""
    deadline = time.monotonic() + WAIT_S
    while True:
        page.goto(url)
        expect(page.locator("#check-explanation")).to_have_attribute("data-outcome", "check")
        when = page.locator("#check-predicted time")
        expect(when).to_be_visible()
        predicted = int(when.get_attribute("data-timestamp") or "0")
        if predicted > after or time.monotonic() > deadline:
            return predicted
        time.sleep(0.2)


@pytest.fixture(scope="module")
def stack_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, httpx.Client]]:
    tmp = tmp_path_factory.mktemp("check-explanation")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()
    name = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_explain"
    with migrated_database(name) as database_url:
        env = broker_env(
            database_url=database_url, redis_url=redis_url, var_dir=tmp / "var", settings=SETTINGS
        )
        static_files(tmp / "var")
        manage(env, "create_console_user", "ann", "--role", "viewer", "--password", PASSWORD)
        token = manage(env, "create_access_key", "explain-admin", "--admin").split()[-1]
        stack = Stack(env, tmp)
        try:
            url = stack.start_broker(free_port())
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
                yield url, api
        finally:
            stack.stop()


def test_the_predicted_next_check_is_kept_by_the_scan_within_one_scan_interval(
    stack_url: tuple[str, httpx.Client],
) -> None:
    url, api = stack_url
    with check_server_running(answer=answer_state("UNKNOW")) as producer:
        for path, body in (
            ("/api/v1/topics", {"name": "ExplainTopic"}),
            ("/api/v1/producer-groups", {"name": "ExplainG", "check_url": producer.url}),
        ):
            answer = api.post(path, json=body)
            assert answer.status_code == 201, answer.text
        sent = api.post(
            "/api/v1/transactions",
            json={
                "producer_group": "ExplainG",
                "topic": "ExplainTopic",
                "body": "order 7",
                "check_immunity_seconds": IMMUNITY_S,
            },
        )
        assert sent.status_code == 201, sent.text
        transaction_id = sent.json()["transaction_id"]
        page_url = f"{url}/console/transactions/{transaction_id}/"

        with sync_playwright() as playwright:
            browser = chromium_launch(playwright)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                console_sign_in(page, url, "ann", PASSWORD)

                first_predicted = _predicted(page, page_url)
                immunity = page.locator('#check-values tr[data-value="check_immunity_ms"]')
                expect(immunity).to_have_attribute("data-source", "message property")
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / "check-explanation.png"), full_page=True)
                first = _checks_awaited(api, transaction_id, 1)[0]

                second_predicted = _predicted(page, page_url, after=first)
                second = _checks_awaited(api, transaction_id, 2)[1]
            finally:
                browser.close()

    assert first_predicted > 0 and second_predicted > first
    assert first_predicted <= first <= first_predicted + SCAN_MS + DISPATCH_MS, (
        first_predicted,
        first,
    )
    assert second_predicted - first >= CHECK_INTERVAL_MS - SCAN_MS, (first, second_predicted)
    assert second_predicted <= second <= second_predicted + SCAN_MS + DISPATCH_MS, (
        second_predicted,
        second,
    )
