"""The stuck list: filters, search, keyset pages, query count, the live row partial."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from broker.models import ProducerGroup, Transaction, TransactionEvent
from broker.rules.clock import now_ms
from broker.selectors.alerts import BANNER_QUERIES
from broker.selectors.transactions import Cursor, stuck_page, stuck_transactions
from broker.services.topology.writes import producer_group_create, topic_create
from broker.services.transactions.end import transaction_end
from console.forms.transactions import TransactionFilterForm, filters_from_form
from tests.console.transactions.conftest import stuck

URL = "/console/transactions/"
ROW_ID = re.compile(r'data-transaction-id="([^"]+)"')


def listed(response) -> list[str]:
    return ROW_ID.findall(response.content.decode())


@pytest.fixture
def world(topic, producer_group):
    """Two groups, two topics; PREPARED and DISCARDED transactions of various ages."""
    topic_create(name="Other", queue_nums=1)
    producer_group_create(name="H", check_url=None)
    now = now_ms()
    return {
        "old": stuck(born=now - 3_600_000, check_times=5, keys="order-1 user-7"),
        "mid": stuck(born=now - 600_000, check_times=1, producer_group="H"),
        "new": stuck(born=now - 1_000, topic="Other"),
        "gone": stuck(
            born=now - 7_200_000, state="DISCARDED", check_times=15, discard_reason="check_max"
        ),
        "aged": stuck(born=now - 9_000_000, state="DISCARDED", discard_reason="file_reserved_time"),
    }


def test_urls_are_the_fixed_names():
    assert reverse("console:transactions") == URL
    assert reverse("console:transaction", args=["a.b"]) == "/console/transactions/a.b/"
    assert reverse("console:transaction_row", args=["x"]) == "/console/transactions/x/row/"


def test_anonymous_goes_to_sign_in_and_a_user_without_role_gets_403(client, console_client):
    assert console_client(None).get(URL).status_code == 403
    login = reverse("console:login")
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(login)


def test_the_list_shows_the_most_stuck_first_and_why(viewer, world):
    response = viewer.get(URL)
    assert response.status_code == 200
    ids = listed(response)
    w = world
    assert ids == [t.transaction_id for t in (w["aged"], w["gone"], w["old"], w["mid"], w["new"])]
    html = response.content.decode()
    assert "discarded: check_max (15 of 15 checks, no end)" in html
    assert f'href="/console/transactions/{w["old"].transaction_id}/"' in html
    assert "5 / 15" in html


@pytest.mark.parametrize(
    "query, expected",
    [
        ("state=PREPARED", ["old", "mid", "new"]),
        ("state=DISCARDED", ["aged", "gone"]),
        ("state=PREPARED&state=DISCARDED", ["aged", "gone", "old", "mid", "new"]),
        ("group=H", ["mid"]),
        ("topic=Other", ["new"]),
        ("min_age_s=1800", ["aged", "gone", "old"]),
        ("min_checks=5", ["gone", "old"]),
        ("discard_reason=file_reserved_time", ["aged"]),
        ("q=user-7", ["old"]),
        ("q=order-1", ["old"]),
        ("q=order", []),
        ("state=PREPARED&group=G&min_checks=1", ["old"]),
    ],
)
def test_each_filter(viewer, world, query, expected):
    response = viewer.get(f"{URL}?{query}")
    assert response.status_code == 200
    assert listed(response) == [world[name].transaction_id for name in expected]


def test_search_by_msg_id_is_exact(viewer, world):
    tid = world["mid"].transaction_id
    assert listed(viewer.get(URL, {"q": tid})) == [tid]
    assert listed(viewer.get(URL, {"q": tid[:-1]})) == []


@pytest.mark.parametrize(
    "query", ["min_age_s=abc", "min_checks=-1", "state=COMMITTED", "after=nonsense", "per_page=500"]
)
def test_bad_parameters_are_a_form_error_not_a_server_error(viewer, world, query):
    response = viewer.get(f"{URL}?{query}")
    assert response.status_code == 400
    assert 'role="alert"' in response.content.decode()
    assert listed(response) == []


def test_the_form_maps_one_to_one_onto_the_selector(world):
    form = TransactionFilterForm(
        {"state": ["DISCARDED"], "min_age_s": "60", "discard_reason": "check_max", "q": " "}
    )
    assert form.is_valid(), form.errors
    filters = filters_from_form(form)
    assert filters == {
        "states": ["DISCARDED"],
        "producer_group": "",
        "topic": "",
        "min_age_ms": 60_000,
        "min_check_times": None,
        "discard_reason": "check_max",
        "q": "",
    }
    assert list(stuck_transactions(**filters)) == [world["gone"]]


def test_keyset_pages_forward_and_back(viewer, world):
    order = ["aged", "gone", "old", "mid", "new"]
    first = viewer.get(URL, {"per_page": 2})
    assert listed(first) == [world[n].transaction_id for n in order[:2]]
    html = first.content.decode()
    assert 'rel="prev"' not in html
    next_href = re.search(r'rel="next" href="\?([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "per_page=2" in next_href and "after=" in next_href
    second = viewer.get(f"{URL}?{next_href}")
    assert listed(second) == [world[n].transaction_id for n in order[2:4]]
    html = second.content.decode()
    prev_href = re.search(r'rel="prev" href="\?([^"]+)"', html).group(1).replace("&amp;", "&")
    next_href = re.search(r'rel="next" href="\?([^"]+)"', html).group(1).replace("&amp;", "&")
    assert listed(viewer.get(f"{URL}?{prev_href}")) == [world[n].transaction_id for n in order[:2]]
    third = viewer.get(f"{URL}?{next_href}")
    assert listed(third) == [world["new"].transaction_id]
    assert 'rel="next"' not in third.content.decode()


def test_ties_on_born_time_are_ordered_by_transaction_id(topic, producer_group):
    born = now_ms() - 10_000
    txs = sorted((stuck(born=born) for _ in range(5)), key=lambda t: t.transaction_id)
    page = stuck_page({}, per_page=2)
    seen = [r.tx.transaction_id for r in page.rows]
    while page.next_cursor:
        page = stuck_page({}, after=page.next_cursor, per_page=2)
        seen += [r.tx.transaction_id for r in page.rows]
    assert seen == [t.transaction_id for t in txs]
    back = stuck_page({}, before=Cursor.of(txs[4]), per_page=3)
    assert [r.tx.transaction_id for r in back.rows] == [t.transaction_id for t in txs[1:4]]
    assert back.prev_cursor == Cursor.of(txs[1])


def _make(n: int, now: int) -> None:
    for i in range(n):
        tx = stuck(born=now - 100_000 + i, check_times=1)
        TransactionEvent.objects.create(
            transaction_id=tx.pk, kind="check_sent", timestamp=now - 10, outcome="UNKNOW"
        )


@pytest.mark.parametrize("rows", [1, 50])
def test_a_page_costs_the_same_queries_for_1_and_50_rows(
    console_client, topic, producer_group, django_assert_max_num_queries, rows
):
    client = console_client("operator")
    _make(rows, now_ms())
    ProducerGroup.objects.filter(name="G").update(unreachable_since=now_ms() - 5000)
    # session + user + permissions (2) + one read per state + the producer groups, and the
    # alerts banner of every page (nothing fires here)
    with django_assert_max_num_queries(7 + BANNER_QUERIES):
        response = client.get(URL)
    assert len(listed(response)) == rows
    html = response.content.decode()
    assert "UNKNOW" in html and "unreachable since" in html


def test_the_row_partial_matches_the_filter_or_answers_204(viewer, world):
    tid = world["old"].transaction_id
    row_url = reverse("console:transaction_row", args=[tid])
    response = viewer.get(row_url, {"state": "PREPARED"})
    assert response.status_code == 200
    body = response.content.decode().strip()
    assert body.startswith("<tr") and body.endswith("</tr>")
    assert listed(response) == [tid]
    assert viewer.get(row_url, {"state": "DISCARDED"}).status_code == 204
    assert viewer.get(row_url, {"min_checks": "x"}).status_code == 400
    transaction_end(transaction_id=tid, producer_group="G", action="commit")
    assert viewer.get(row_url).status_code == 204
    assert viewer.get(reverse("console:transaction_row", args=["nope"])).status_code == 204


def test_htmx_resync_gets_the_table_alone(viewer, world):
    response = viewer.get(URL, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="tx-table")
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="tx-table"')
    assert "<html" not in html
    assert len(listed(response)) == 5


def test_live_script_and_pause_control_are_on_the_page(viewer, world):
    html = viewer.get(URL).content.decode()
    assert "console/transactions.js" in html
    assert 'id="live-pause"' in html


def test_selection_controls_only_for_operators(console_client, world):
    operator_html = console_client("operator").get(URL, {"group": "G"}).content.decode()
    viewer_html = console_client("viewer").get(URL, {"group": "G"}).content.decode()
    for html in (viewer_html,):
        assert 'id="bulk-form"' not in html
        assert 'name="transaction_id"' not in html
    assert 'id="bulk-form"' in operator_html
    assert 'name="transaction_id" value="' in operator_html
    assert '<input type="hidden" name="group" value="G">' in operator_html
    assert 'name="scope" value="filter"' in operator_html
    assert 'name="reason" required' in operator_html


def test_no_transaction_row_is_left_out_by_the_state_split(topic, producer_group):
    # DISCARDED and PREPARED interleaved by age: the per-state reads merge in order.
    now = now_ms()
    made = [
        stuck(born=now - 1000 * i, state="DISCARDED" if i % 2 else "PREPARED") for i in range(7)
    ]
    page = stuck_page({}, per_page=3)
    expected = sorted(made, key=lambda t: (t.born_timestamp, t.transaction_id))
    assert [r.tx.pk for r in page.rows] == [t.pk for t in expected[:3]]
    assert Transaction.objects.count() == 7
