"""Users of each console role, and stuck transactions to list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from broker.models import Transaction
from tests.console.conftest import signed_in
from tests.support import prepare


@pytest.fixture
def console_client(db) -> Callable[[str | None], Client]:
    """``console_client("viewer")``: a new Django test client signed in as a new user of that
    role (``tests.console.conftest.signed_in``), or with no console role for ``None``."""

    def make(role: str | None) -> Client:
        client = Client()
        signed_in(client, role)
        return client

    return make


@pytest.fixture
def short_checks(broker_settings) -> dict[str, int]:
    """Checks due 1 ms after birth and 1 ms apart (so tests run on the real clock)."""
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 1
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 1
    return broker_settings


@pytest.fixture
def viewer(console_client) -> Client:
    return console_client("viewer")


def stuck(
    *, born: int, state: str = "PREPARED", check_times: int = 0, **fields: Any
) -> Transaction:
    """A PREPARED transaction through the service, then its derived row set as a test needs
    (born at ``born`` ms, DISCARDED with a reason, N checks...)."""
    make = {k: fields.pop(k) for k in ("producer_group", "topic", "keys", "body") if k in fields}
    tx = prepare(**make)
    update: dict[str, Any] = {"born_timestamp": born, "check_times": check_times, **fields}
    if state == "DISCARDED":
        update.update(state="DISCARDED", resolved_by="discard", resolved_timestamp=born + 1)
        update.setdefault("discard_reason", "check_max")
    Transaction.objects.filter(pk=tx.pk).update(**update)
    tx.refresh_from_db()
    return tx


LIFE_KINDS = [
    "half_stored",
    "check_sent",
    "check_sent",
    "resolved",
    "delivered",
    "consumer_received",
    "consumer_acked",
]
"""The timeline kinds of ``lived_transaction``, in order."""


def lived_transaction(consumer_group: str = "C") -> tuple[Transaction, dict[str, Any]]:
    """A transaction through its whole life, by the services: half message, two back-checks
    answered UNKNOW over HTTP by a ``CheckServer``, a producer commit, a receive by consumer
    group ``consumer_group`` and its ack. Producer group G must exist (its check_url is set
    here), topic TranTest and the consumer group too. Returns the transaction and what the
    steps gave (``outcomes``: the two rounds' outcomes).

    Runs on the real clock: use it with the ``short_checks`` fixture (1 ms timeout and check
    interval), so the journal's times are in the order things happened."""
    import time

    from broker.models import ProducerGroup
    from broker.rules.clock import now_ms
    from broker.services.consumption.receive import messages_ack, messages_receive
    from broker.services.transactions.end import transaction_end
    from tests.support import answer_state, check_server_running, round_for

    tx = prepare(body='{"order": 42}', keys="order-42")
    with check_server_running(answer_state("UNKNOW")) as server:
        ProducerGroup.objects.filter(name="G").update(check_url=server.url)
        time.sleep(0.005)
        one = round_for(tx, now_ms())
        time.sleep(0.005)
        two = round_for(tx, now_ms())
    tx = transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="commit")
    received = messages_receive(
        consumer_group=consumer_group,
        topic="TranTest",
        max_messages=32,
        invisible_duration_ms=60_000,
    )
    acked, _ = messages_ack(
        consumer_group=consumer_group, receipt_handles=[r.receipt_handle for r in received]
    )
    tx.refresh_from_db()
    return tx, {"outcomes": one["outcomes"] + two["outcomes"], "acked": acked}
