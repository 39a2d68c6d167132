"""What an operator sees while the broker's database does not answer (Chromium, a running
broker: web, gRPC, Celery worker and beat, on a PostgreSQL cluster of the test's own,
``tests.e2e.services.PrivatePostgres``, stopped and started):

- an open console page shows the banner "The database does not answer" without a reload, and
  loses it, again without a reload, when the database is back;
- a console page asked for meanwhile is the HTML 503 page (``Retry-After``), which reloads
  itself into the page once the database is back;
- ``/metrics`` answers 200 all along: ``halfmoon_database_up`` 0 and the 503s counted in
  ``halfmoon_database_unavailable_responses_total`` while it is away, every family again after.

Every wait is a condition with a deadline (the banner's script asks ``/healthz`` every 5 s,
every 2 s while the database is away).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.console_stack import ConsoleBroker, console_broker, shot
from tests.e2e.processes import chromium_launch, console_sign_in, free_port
from tests.e2e.services import PrivatePostgres, pg_bin

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL's initdb is not installed"),
]
expect.set_options(timeout=30_000)

PASSWORD = "database-away-browser-pw"
TOPIC, GROUP = "AwayTopic", "away-producers"
UNAVAILABLE = "halfmoon_database_unavailable_responses_total"


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivatePostgres]:
    postgres = PrivatePostgres(free_port())
    try:
        postgres.init()
        postgres.start()
        yield postgres
    finally:
        postgres.remove()


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, cluster: PrivatePostgres
) -> Iterator[ConsoleBroker]:
    tmp: Path = tmp_path_factory.mktemp("database-away-browser")
    users = [("olga", "--role", "operator", "--password", PASSWORD)]
    database_url = cluster.create_database("halfmoon")
    with console_broker(tmp, "dbaway", users=users, database_url=database_url) as running:
        running.topology(TOPIC, producer_groups=[GROUP])
        yield running


def scrape(url: str) -> tuple[int, dict[str, float], set[str]]:
    """GET /metrics on a new connection (so either web process may answer): its status, its
    unlabelled samples by name and its family names."""
    response = httpx.get(f"{url}/metrics", timeout=15)
    families = list(text_string_to_metric_families(response.text))
    samples = {s.name: s.value for f in families for s in f.samples if not s.labels}
    return response.status_code, samples, {f.name for f in families}


def figures_back(url: str) -> bool:
    """Whether a scrape read the database again: ``halfmoon_database_up`` 1 beside its
    families."""
    _, samples, families = scrape(url)
    return samples["halfmoon_database_up"] == 1 and "halfmoon_pending_transactions" in families


def test_the_console_and_metrics_while_the_database_is_away_and_back(
    broker: ConsoleBroker, cluster: PrivatePostgres
) -> None:
    transaction_id = broker.send_half(GROUP, TOPIC, "order 7")
    status, samples, families = scrape(broker.url)
    assert status == 200 and samples["halfmoon_database_up"] == 1
    assert "halfmoon_pending_transactions" in families

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            context = chromium.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            console_sign_in(page, broker.url, "olga", PASSWORD)
            page.goto(f"{broker.url}/console/transactions/{transaction_id}/")
            expect(page.locator("#tx-state")).to_have_text("PREPARED")
            banner = page.locator("#database-banner")
            expect(banner).to_be_hidden()

            cluster.stop()

            expect(banner).to_be_visible()
            expect(banner).to_contain_text("The database does not answer")
            expect(banner.locator("[data-database-error]")).to_have_text(
                re.compile(r"^(OperationalError|InterfaceError)$")
            )
            shot(page, "database-away-banner")

            # The API refuses, with Retry-After; /metrics still answers, without the database.
            refused = broker.api.post(
                "/api/v1/transactions", json={"producer_group": GROUP, "topic": TOPIC, "body": "x"}
            )
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
            status, samples, families = scrape(broker.url)
            assert status == 200 and samples["halfmoon_database_up"] == 0, samples
            assert families == {"halfmoon_database_up", "halfmoon_database_unavailable_responses"}
            # Per process: some scrape reaches the web process that answered that 503.
            broker.stack.wait_until(
                "a scrape counting the 503",
                lambda: scrape(broker.url)[1][UNAVAILABLE] >= 1,
                timeout_s=60,
            )

            # A console page asked for now: the HTML 503, which reloads itself when it is back.
            other = context.new_page()
            answer = other.goto(f"{broker.url}/console/")
            assert answer is not None and answer.status == 503
            assert answer.headers["retry-after"] == "5"
            assert answer.headers["content-type"].startswith("text/html")
            expect(other.locator("h1")).to_have_text("503 · Database unavailable")
            shot(other, "database-away-503-page")

            cluster.start()

            expect(banner).to_be_hidden()
            expect(page.locator("#tx-state")).to_have_text("PREPARED")
            expect(other.locator("h1")).not_to_contain_text("Database unavailable")
            expect(other.locator("#database-banner")).to_be_hidden()
            assert other.url.endswith("/console/")
        finally:
            chromium.close()

    # Each web process's pool gives at most one dead connection per slot before reconnecting.
    broker.stack.wait_until(
        "a scrape with the database's figures again", lambda: figures_back(broker.url), timeout_s=60
    )
    broker.stack.wait_until(
        "the API answering again",
        lambda: broker.api.get(f"/api/v1/transactions/{transaction_id}").status_code == 200,
        timeout_s=60,
    )
    assert broker.state(transaction_id) == "PREPARED"
    assert "Internal Server Error" not in broker.stack.web_logs()
