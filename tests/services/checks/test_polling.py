"""Checks of producer groups that poll (broker/services/checks/polling.py,
``check_requests_poll``; api-v1 ``GET /producer-groups/{group}/check-requests``)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from broker.models import (
    CheckRequest,
    ProducerGroup,
)
from broker.services import checks
from broker.services.transactions.end import transaction_end
from tests.services.checks.helpers import (
    CONTRACT_FIELDS,
    INTERVAL,
    refreshed,
)
from tests.support import (
    due_at,
    prepare,
    round_for,
)


def test_poll_group_check_request_handed_out_once_and_counted(
    topic, producer_group, producer, broker_settings
):
    tx = prepare()
    result = round_for(tx, due_at(tx))
    assert result["due"] == 1 and result["jobs"] == []
    assert (
        CheckRequest.objects.filter(transaction=tx, delivered_timestamp__isnull=True).count() == 1
    )
    assert refreshed(tx).check_times == 0  # queued is not delivered

    response = producer.get("/api/v1/producer-groups/G/check-requests")
    assert response.status_code == 200, response.content
    [request] = response.json()["check_requests"]
    assert set(request) == CONTRACT_FIELDS | {"body"}
    assert request["transaction_id"] == tx.transaction_id
    assert request["check_times"] == 1
    assert refreshed(tx).check_times == 1

    assert producer.get("/api/v1/producer-groups/G/check-requests").json() == {"check_requests": []}

    response = producer.post(
        f"/api/v1/transactions/{tx.transaction_id}/end",
        {"producer_group": "G", "action": "rollback", "from_transaction_check": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    tx = refreshed(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("ROLLED_BACK", "check", 1)


def test_poll_group_nobody_polling_is_uncounted_and_unreachable(topic, producer_group):
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)
    producer_group.refresh_from_db()
    assert producer_group.unreachable_since is None

    round_for(tx, due + INTERVAL)
    producer_group.refresh_from_db()
    assert producer_group.unreachable_since == due + INTERVAL
    assert producer_group.last_check_error
    assert refreshed(tx).check_times == 0
    assert CheckRequest.objects.filter(transaction=tx).count() == 1

    # A poller comes: the request is handed out, counted, and the group is reachable again.
    [request] = checks.check_requests_poll(producer_group="G")
    assert request["check_times"] == 1
    assert refreshed(tx).check_times == 1
    producer_group.refresh_from_db()
    assert (producer_group.unreachable_since, producer_group.last_check_error) == (None, "")


def test_poll_group_request_of_a_resolved_transaction_is_not_handed_out(topic, producer_group):
    tx = prepare()
    round_for(tx, due_at(tx))
    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="commit")

    assert checks.check_requests_poll(producer_group="G") == []
    assert not CheckRequest.objects.filter(transaction=tx).exists()
    tx = refreshed(tx)
    assert (tx.check_times, tx.resolved_by) == (0, "producer")


def test_poll_group_repeated_checks_count_up(topic, producer_group, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 2
    tx = prepare()
    due = due_at(tx)
    for k in range(2):
        round_for(tx, due + k * INTERVAL)
        [request] = checks.check_requests_poll(producer_group="G")
        assert request["check_times"] == k + 1
    round_for(tx, due + 2 * INTERVAL)
    tx = refreshed(tx)
    assert (tx.state, tx.discard_reason, tx.check_times) == ("DISCARDED", "check_max", 2)
    assert checks.check_requests_poll(producer_group="G") == []


@pytest.mark.django_db(transaction=True)
def test_long_poll_returns_as_soon_as_a_request_is_queued(topic, producer_group, producer):
    tx = prepare()
    result: dict = {}

    def poll():
        try:
            started = time.monotonic()
            response = producer.get("/api/v1/producer-groups/G/check-requests?wait_ms=20000")
            result["elapsed"] = time.monotonic() - started
            result["status"] = response.status_code
            result["body"] = response.json()
        finally:
            connection.close()

    def last_poll() -> int | None:
        return ProducerGroup.objects.get(name="G").last_poll_timestamp

    thread = threading.Thread(target=poll)
    thread.start()
    # Waiting, nothing queued yet: the poll has looked for requests at least twice.
    deadline = time.monotonic() + 10
    while (first := last_poll()) is None:
        assert time.monotonic() < deadline, "the poll never looked for requests"
        time.sleep(0.02)
    while last_poll() == first:
        assert time.monotonic() < deadline, "the poll looked once and did not wait"
        time.sleep(0.02)
    assert thread.is_alive()
    round_for(tx, due_at(tx))
    thread.join(25)
    assert not thread.is_alive()
    assert result["status"] == 200
    [request] = result["body"]["check_requests"]
    assert request["transaction_id"] == tx.transaction_id
    assert result["elapsed"] < 15  # well before wait_ms ran out
    assert refreshed(tx).check_times == 1
