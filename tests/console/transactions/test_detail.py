"""The transaction page and its timeline (the selector the API shares)."""

from __future__ import annotations

import pytest

from broker.errors import NotFound
from broker.selectors.timeline import transaction_timeline
from broker.services.consumption.receive import messages_receive
from broker.services.transactions.half import transaction_prepare
from broker.services.transactions.operator import transaction_operator_resolve
from tests.console.transactions.conftest import LIFE_KINDS, lived_transaction, stuck


def page(client, tx):
    return client.get(f"/console/transactions/{tx.transaction_id}/")


def test_text_body(viewer, topic, producer_group):
    tx = stuck(born=1_000, body="order 42 paid")
    html = page(viewer, tx).content.decode()
    assert "text, 13 bytes" in html
    assert '<pre class="body body-text">order 42 paid</pre>' in html


def test_json_body_is_pretty(viewer, topic, producer_group):
    tx = stuck(born=1_000, body='{"order":42,"paid":true}')
    html = page(viewer, tx).content.decode()
    assert (
        '<pre class="body body-json">{\n  &quot;order&quot;: 42,\n  &quot;paid&quot;: true\n}</pre>'
        in html
    )


def test_binary_body_is_hex_and_a_long_one_is_cut(viewer, topic, producer_group):
    body = bytes(range(256)) * 40  # 10 KiB of binary
    tx, _ = transaction_prepare(
        producer_group="G", topic="TranTest", body=body, body_is_text=False, properties={"a": "1"}
    )
    html = page(viewer, tx).content.decode()
    assert '<pre class="body body-hex">00000000  00 01 02 03' in html
    assert "hex, 10240 bytes" in html and "the first 4096 bytes are shown" in html
    assert "<code>a</code></td><td>1</td>" in html


def test_unknown_transaction_is_404(viewer, db):
    assert viewer.get("/console/transactions/nope/").status_code == 404
    with pytest.raises(NotFound):
        transaction_timeline("nope")


def test_action_controls_only_for_operators(console_client, topic, producer_group):
    tx = stuck(born=1_000)
    viewer_html = page(console_client("viewer"), tx).content.decode()
    operator_html = page(console_client("operator"), tx).content.decode()
    assert 'id="tx-detail"' in viewer_html
    assert "/actions/commit/" not in viewer_html
    assert f"/console/transactions/{tx.transaction_id}/actions/commit/" in operator_html


def test_the_timeline_of_a_whole_life_in_order(
    viewer, topic, producer_group, consumer_group, short_checks
):
    tx, steps = lived_transaction()
    assert steps["acked"] == 1
    timeline = transaction_timeline(tx.transaction_id)
    kinds = [e.kind for e in timeline]
    assert kinds == LIFE_KINDS
    half, check1, check2, end, delivered, received, acked = timeline
    assert half.actor == "producer group G"
    assert half.detail["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC"
    assert (check1.detail["check_times"], check2.detail["check_times"]) == (1, 2)
    assert check1.detail["answer"] == "UNKNOW" and check1.actor == "http"
    assert isinstance(check1.detail["latency_ms"], int) and check1.detail["latency_ms"] >= 0
    assert "Check 1 of" in check1.title and "UNKNOW in" in check1.title
    assert end.title == "Committed by the producer (end transaction)"
    assert end.actor == "producer group G"
    assert delivered.detail["topic"] == "TranTest"
    assert delivered.detail["queue_offset"] == tx.queue_offset
    assert received.actor == acked.actor == "C"
    assert received.detail["delivery_attempt"] == acked.detail["delivery_attempt"] == 1
    assert delivered.timestamp <= received.timestamp <= acked.timestamp  # the delivery journal
    timestamps = [e.timestamp for e in timeline if e.timestamp is not None]
    assert timestamps == sorted(timestamps)

    html = page(viewer, tx).content.decode()
    for entry in timeline:
        assert f'data-kind="{entry.kind}"' in html
    assert "Acked by C" in html


def test_in_flight_delivery_and_operator_end(topic, producer_group, consumer_group):
    tx = stuck(born=1_000)
    transaction_operator_resolve(
        transaction_id=tx.transaction_id, action="commit", reason="ticket 7", actor="operator:ann"
    )
    messages_receive(
        consumer_group="C", topic="TranTest", max_messages=1, invisible_duration_ms=60_000
    )
    timeline = transaction_timeline(tx.transaction_id)
    end = next(e for e in timeline if e.kind == "resolved")
    assert end.title == "Committed by operator ann: ticket 7"
    assert end.actor == "operator:ann"
    assert end.detail["previous_state"] == "PREPARED"
    flight = timeline[-1]
    assert flight.kind == "consumer_in_flight"
    assert flight.detail["delivery_attempt"] == 1
