"""The "Why the next check happens when it does" panel of the transaction page and of the
producer group page, rendered from ``broker.selectors.check_explanations``."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from broker.models import ProducerGroup, Transaction
from console.templatetags.console_time import iso
from tests.console.overview.conftest import console_client
from tests.support import prepare

__all__ = ["console_client"]

HEADING = "Why the next check happens when it does"


@pytest.fixture
def viewer(console_client) -> Client:
    return console_client("viewer")


def panel(html: str) -> str:
    found = re.search(r'<section aria-labelledby="check-why".*?</section>', html, re.S)
    assert found, "no check explanation panel"
    return found.group(0)


def row(html: str, name: str) -> tuple[str, str]:
    found = re.search(
        rf'<tr data-value="{name}" data-source="([^"]*)"><th scope="row">[^<]*</th><td>([^<]*)</td>',
        html,
    )
    assert found, f"no row {name}"
    return found.group(1), found.group(2)


def test_the_transaction_page_explains_a_first_check(
    viewer, topic, producer_group, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    tx = prepare(check_immunity_seconds=120)
    html = viewer.get(f"/console/transactions/{tx.transaction_id}/").content.decode()
    assert f'<h2 id="check-why">{HEADING}</h2>' in html
    p = panel(html)
    at = iso(tx.born_timestamp + 120_000)
    assert f'Next: a back-check at <time datetime="{at}"' in p
    assert 'data-reason="check_immunity"' in p
    assert 'class="warn" data-warning="immunity_beyond_checks"' in p
    assert row(p, "check_immunity_ms") == ("message property", "2 min (120000 ms)")
    assert row(p, "check_max") == ("setting", "3")
    assert row(p, "check_interval_ms")[0] == "default"
    assert row(p, "file_reserved_hours") == ("default", "72 h")
    assert f"GET /api/v1/transactions/{tx.transaction_id}/check-explanation" in p


def test_a_resolved_transaction_has_no_next_check(viewer, topic, producer_group):
    tx = prepare()
    Transaction.objects.filter(pk=tx.pk).update(
        state="DISCARDED", resolved_by="discard", resolved_timestamp=1, discard_reason="check_max"
    )
    p = panel(viewer.get(f"/console/transactions/{tx.transaction_id}/").content.decode())
    assert "No check is coming." in p
    assert 'data-reason="resolved"' in p
    assert "data-warning" not in p


def test_the_producer_group_page_explains_its_next_check(viewer, topic, producer_group):
    tx = prepare()
    ProducerGroup.objects.filter(name="G").update(
        check_failures=1, check_backoff_until=tx.born_timestamp + 50_000, unanswered_since=123
    )
    html = viewer.get(reverse("console:producer_group_clients", args=["G"])).content.decode()
    p = panel(html)
    assert f'Next: a back-check at <time datetime="{iso(tx.born_timestamp + 50_000)}"' in p
    assert f"due first, {tx.transaction_id} (1 pending)" in p
    assert 'data-reason="transaction_timeout"' in p and 'data-reason="group_backoff"' in p
    assert 'data-warning="group_down"' in p
    assert f'Down since <time datetime="{iso(123)}"' in p
    assert "GET /api/v1/producer-groups/G/check-explanation" in p


def test_a_group_without_pending_transactions(viewer, producer_group):
    html = viewer.get(reverse("console:producer_group_clients", args=["G"])).content.decode()
    p = panel(html)
    assert "No check is coming." in p
    assert 'data-reason="no_pending"' in p


def test_the_consumer_group_page_has_no_panel(viewer, db):
    from broker.services.topology.writes import consumer_group_create

    consumer_group_create(name="C", max_delivery_attempts=3)
    html = viewer.get(reverse("console:consumer_group_clients", args=["C"])).content.decode()
    assert HEADING not in html
