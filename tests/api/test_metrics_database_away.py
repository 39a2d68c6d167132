"""/metrics while the database does not answer: 200 all the same, with the process's own
``halfmoon_database_up`` 0 and ``halfmoon_database_unavailable_responses_total`` and without
the families read from the database (never a 500 or a 503, so Prometheus keeps scraping and
``HalfmoonDatabaseDown`` can fire instead of ``HalfmoonBrokerDown``); back to every family and
``halfmoon_database_up`` 1 when it answers again, with no restart.

The database is made unreachable for real (``tests.database_away``): connection refused."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.api_helpers import send_half
from tests.database_away import closed_port, database_at

pytestmark = pytest.mark.django_db

DATABASE_FAMILIES = {
    "rocketmq_half_messages",
    "rocketmq_commit_messages",
    "halfmoon_checks",
    "halfmoon_pending_transactions",
    "halfmoon_producer_group_reachable",
    "halfmoon_consumer_group_lag",
}
UNAVAILABLE = "halfmoon_database_unavailable_responses_total"


def scrape() -> tuple[int, dict[str, float], set[str]]:
    """GET /metrics: its status, its unlabelled samples by name, and its family names."""
    response = Client(raise_request_exception=False).get("/metrics")
    families = list(text_string_to_metric_families(response.content.decode()))
    samples = {s.name: s.value for f in families for s in f.samples if not s.labels}
    return response.status_code, samples, {f.name for f in families}


def test_with_the_database_up_metrics_say_so_beside_every_family(owner, topic, producer_group):
    send_half(owner)

    status, samples, families = scrape()

    assert status == 200
    assert samples["halfmoon_database_up"] == 1
    assert UNAVAILABLE in samples
    assert families >= DATABASE_FAMILIES


def test_while_the_database_refuses_connections_metrics_answer_200_without_its_families(
    owner, topic, producer_group
):
    send_half(owner)
    with database_at(closed_port()):
        status, samples, families = scrape()

    assert status == 200
    assert samples["halfmoon_database_up"] == 0
    assert UNAVAILABLE in samples
    assert families == {"halfmoon_database_up", "halfmoon_database_unavailable_responses"}

    status, samples, families = scrape()  # back: the same process reads it again
    assert status == 200
    assert samples["halfmoon_database_up"] == 1
    assert families >= DATABASE_FAMILIES


def test_every_503_for_want_of_the_database_is_counted_api_and_console(owner):
    owner.raise_request_exception = False
    console = Client(raise_request_exception=False)
    console.cookies["sessionid"] = "a" * 32  # a session to look up: the console needs the database
    before = scrape()[1][UNAVAILABLE]
    with database_at(closed_port()):
        assert owner.get("/api/v1/topics").status_code == 503
        assert owner.post("/api/v1/topics", {"name": "T", "queue_nums": 1}).status_code == 503
        assert console.get("/console/").status_code == 503
        during = scrape()[1][UNAVAILABLE]

    assert during == before + 3
    assert owner.get("/api/v1/topics").status_code == 200
    assert scrape()[1][UNAVAILABLE] == before + 3  # a scrape without the database is no 503
