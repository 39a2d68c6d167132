"""The RocketMQ clients seen over gRPC in the console: a count per group on the producer and
consumer groups pages, linking to each group's connection list (rocketmq-dashboard's
producer and consumer connections), and how each check travelled on a transaction's page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from broker.models import ClientConnection
from broker.rules.clock import now_ms
from broker.services.topology.writes import (
    consumer_group_create,
    producer_group_create,
    topic_create,
)
from broker.services.transactions.end import transaction_end
from tests.console.overview.conftest import console_client
from tests.support import due_at, prepare, round_for

__all__ = ["console_client"]

EXPIRY_MS = 120_000  # HALFMOON_GRPC_CLIENT_EXPIRY_MS of these tests


@pytest.fixture(autouse=True)
def _expiry(broker_settings) -> None:
    broker_settings["HALFMOON_GRPC_CLIENT_EXPIRY_MS"] = EXPIRY_MS


@pytest.fixture
def viewer(console_client) -> Client:
    return console_client("viewer")


@pytest.fixture
def groups(db) -> None:
    """Topic TranTest, producer groups G and H (G polls for checks), consumer groups C and D."""
    topic_create(name="TranTest", queue_nums=2)
    producer_group_create(name="G", check_url=None)
    producer_group_create(name="H", check_url=None)
    consumer_group_create(name="C")
    consumer_group_create(name="D")


def seen(client_id: str, *, heard_ms_ago: int = 0, **fields: Any) -> ClientConnection:
    """A client row as the gRPC server writes it: a Python producer of G by default."""
    now = now_ms()
    row: dict[str, Any] = {
        "kind": ClientConnection.Kind.PRODUCER,
        "language": "PYTHON",
        "version": "5.1.2",
        "host": "10.0.0.7:50412",
        "producer_groups": ["G"],
        "topics": ["TranTest"],
        "server": "grpc-1",
        "connected_timestamp": now - heard_ms_ago - 60_000,
        "last_heartbeat_timestamp": now - heard_ms_ago,
        **fields,
    }
    return ClientConnection.objects.create(client_id=client_id, **row)


def consumer(client_id: str, group: str = "C", **fields: Any) -> ClientConnection:
    fields.setdefault("kind", ClientConnection.Kind.PUSH_CONSUMER)
    return seen(client_id, producer_groups=[], consumer_group=group, **fields)


def cell(html: str, group: str) -> str:
    """The gRPC clients cell of ``group``'s row on a groups page."""
    row = re.search(
        rf'<th scope="row">(?:<a href="[^"]*">)?{group}(?:</a>)?</th>(.*?)</tr>', html, re.S
    )
    assert row, html
    found = re.search(r'<td class="clients">(.*?)</td>', row.group(1), re.S)
    assert found, row.group(1)
    return found.group(1)


def listed(html: str) -> list[tuple[str, str]]:
    """(client id, live) of each row of a connection list, in order."""
    return re.findall(r'<tr data-client-id="([^"]+)" data-live="(true|false)">', html)


# --- The groups pages count each group's clients ------------------------------------------------


def test_the_producer_groups_page_counts_live_and_gone_clients_and_links_them(viewer, groups):
    seen("p1")
    seen("p2", heard_ms_ago=5_000)
    seen("p3", disconnected_timestamp=now_ms() - 1_000)
    seen("h1", producer_groups=["H"], heard_ms_ago=EXPIRY_MS + 1_000)  # silent: gone

    html = viewer.get(reverse("console:producer_groups")).content.decode()

    link = reverse("console:producer_group_clients", args=["G"])
    assert cell(html, "G") == f'<a href="{link}"><span class="ok">2 live</span>, 1 gone</a>'
    assert cell(html, "H").endswith("0 live, 1 gone</a>")


def test_a_group_without_clients_says_none(viewer, groups):
    seen("long-gone", heard_ms_ago=2 * 3_600_000, disconnected_timestamp=now_ms() - 3_700_000)

    producers = viewer.get(reverse("console:producer_groups")).content.decode()
    consumers = viewer.get(reverse("console:consumer_groups")).content.decode()

    assert cell(producers, "G") == '<span class="hint">none</span>'
    assert cell(consumers, "C") == '<span class="hint">none</span>'


def test_the_consumer_groups_page_counts_each_groups_consumers(viewer, groups):
    consumer("c1")
    consumer("c2", kind=ClientConnection.Kind.SIMPLE_CONSUMER)
    consumer("d1", group="D", disconnected_timestamp=now_ms() - 1_000)
    seen("a-producer")

    html = viewer.get(reverse("console:consumer_groups")).content.decode()

    link = reverse("console:consumer_group_clients", args=["C"])
    assert cell(html, "C") == f'<a href="{link}"><span class="ok">2 live</span></a>'
    assert cell(html, "D").endswith("0 live, 1 gone</a>")


def _queries(client: Client, route: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(reverse(route)).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("route", ["console:producer_groups", "console:consumer_groups"])
def test_the_count_costs_the_same_queries_whatever_the_clients(viewer, groups, route):
    seen("first")
    consumer("first-consumer")
    before = _queries(viewer, route)
    for i in range(20):
        seen(f"p{i}", producer_groups=["G", "H"])
        consumer(f"c{i}", group="CD"[i % 2])

    assert _queries(viewer, route) == before


# --- A group's connection list ------------------------------------------------------------------


def test_a_producer_groups_page_lists_its_clients_live_first(viewer, groups):
    now = now_ms()
    seen("gone@1", heard_ms_ago=30_000, disconnected_timestamp=now - 20_000)
    seen("silent@2", heard_ms_ago=EXPIRY_MS + 10_000)
    seen("node@3", language="HTTP", version="1.0.8", access_key="shop", heard_ms_ago=2_000)
    seen("py@4", access_key="")
    seen("other@5", producer_groups=["H"])

    page = viewer.get(reverse("console:producer_group_clients", args=["G"]))

    assert page.status_code == 200
    html = page.content.decode()
    assert listed(html) == [
        ("py@4", "true"),
        ("node@3", "true"),
        ("gone@1", "false"),
        ("silent@2", "false"),
    ]
    assert "<td>HTTP 1.0.8</td>" in html and "<td>PYTHON 5.1.2</td>" in html
    assert "<td>Producer</td>" in html
    assert '<th scope="col">Publishes</th>' in html and "<td>TranTest</td>" in html
    assert "<td>shop</td>" in html and '<span class="hint">anonymous</span>' in html
    assert html.count('<span class="ok">live</span>') == 2
    assert "disconnected <time" in html and '<span class="warn">silent</span>' in html


def test_a_consumer_groups_page_lists_its_consumers_and_their_subscriptions(viewer, groups):
    consumer("push@1", topics=["TranTest", "Orders"])
    consumer("simple@2", kind=ClientConnection.Kind.SIMPLE_CONSUMER, heard_ms_ago=1_000)
    consumer("elsewhere@3", group="D")

    html = viewer.get(reverse("console:consumer_group_clients", args=["C"])).content.decode()

    assert listed(html) == [("push@1", "true"), ("simple@2", "true")]
    assert "<td>Push Consumer</td>" in html and "<td>Simple Consumer</td>" in html
    assert '<th scope="col">Subscribes to</th>' in html
    assert "<td>TranTest, Orders</td>" in html


def test_a_group_with_no_clients_says_so(viewer, groups):
    html = viewer.get(reverse("console:producer_group_clients", args=["G"])).content.decode()
    assert listed(html) == []
    assert "No gRPC client of this group within the last hour." in html


@pytest.mark.parametrize(
    "route", ["console:producer_group_clients", "console:consumer_group_clients"]
)
def test_an_unknown_group_is_404(viewer, groups, route):
    assert viewer.get(reverse(route, args=["nope"])).status_code == 404


@pytest.mark.parametrize(
    "route", ["console:producer_group_clients", "console:consumer_group_clients"]
)
def test_only_console_users_see_it(console_client, groups, route):
    url = reverse(route, args=["G" if "producer" in route else "C"])
    anonymous = Client().get(url)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse("console:login"))
    assert console_client(None).get(url).status_code == 403


# --- A transaction's page says how each check travelled and who answered ------------------------


def test_the_timeline_shows_a_telemetry_check_and_the_grpc_client_that_answered(viewer, groups):
    tx = prepare(producer_client_id="app@1")  # no live client: the check is undelivered
    round_for(tx, due_at(tx))
    transaction_end(
        transaction_id=tx.transaction_id,
        producer_group="G",
        action="rollback",
        from_transaction_check=True,
        remark="gRPC client app@2",
    )

    html = viewer.get(f"/console/transactions/{tx.transaction_id}/").content.decode()

    assert "Check not delivered over telemetry (gRPC)" in html
    assert '<span class="actor channel">— via telemetry (gRPC)</span>' in html
    assert "Rolled back by a check answer of producer group G: gRPC client app@2" in html


def test_the_timeline_shows_a_long_poll_check_by_its_name(viewer, groups):
    from broker.services.checks.polling import check_requests_poll

    tx = prepare()
    round_for(tx, due_at(tx))
    assert len(check_requests_poll(producer_group="G")) == 1

    html = viewer.get(f"/console/transactions/{tx.transaction_id}/").content.decode()

    assert "sent over long poll: no answer yet" in html
    assert '<span class="actor channel">— via long poll</span>' in html
