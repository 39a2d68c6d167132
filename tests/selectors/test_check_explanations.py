"""broker.selectors.check_explanations on the real database: the transaction, its half
message's immunity, the group's backoff and reachability and the settings' sources."""

from __future__ import annotations

import pytest

from broker.errors import NotFound
from broker.models import ProducerGroup, Transaction
from broker.rules.check_explanation import SourcedValue
from broker.selectors.check_explanations import (
    check_explanation_of_producer_group,
    check_explanation_of_transaction,
    check_settings,
)
from tests.support import prepare, round_for

pytestmark = pytest.mark.django_db


def test_settings_tell_their_source(broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    s = check_settings()
    assert s.check_max == SourcedValue(3, "setting")
    assert s.transaction_timeout_ms == SourcedValue(6000, "default")
    assert s.check_interval_ms == SourcedValue(30_000, "default")
    assert s.undelivered_backoff_ms == SourcedValue(1000, "default")
    assert s.group_max_in_flight == SourcedValue(16, "default")
    assert s.group_max_per_second == SourcedValue(100, "default")
    assert s.file_reserved_hours == SourcedValue(72, "default")


def test_a_new_transaction_waits_for_its_immunity(topic, producer_group):
    tx = prepare(check_immunity_seconds=60)
    got = check_explanation_of_transaction(tx.transaction_id, now=tx.born_timestamp + 10)
    e = got.explanation
    assert (got.transaction_id, got.producer_group, got.state) == (
        tx.transaction_id,
        "G",
        "PREPARED",
    )
    assert e.predicted_timestamp == tx.born_timestamp + 60_000
    assert e.reasons == ("check_immunity",)
    assert e.values["check_immunity_ms"] == SourcedValue(60_000, "message property")
    assert e.outcome == "check"


def test_without_immunity_the_timeout_applies(topic, producer_group, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 9000
    tx = prepare()
    e = check_explanation_of_transaction(tx.transaction_id, now=tx.born_timestamp).explanation
    assert e.predicted_timestamp == tx.born_timestamp + 9000
    assert e.reasons == ("transaction_timeout",)
    assert e.values["check_immunity_ms"] == SourcedValue(9000, "setting")


def test_after_a_check_the_interval_applies(topic, producer_group):
    tx = prepare()
    at = tx.born_timestamp + 6000
    round_for(tx, at)  # G polls: a check request is queued, the lease moves one interval on
    tx.refresh_from_db()
    Transaction.objects.filter(pk=tx.pk).update(last_check_timestamp=at, check_times=1)
    e = check_explanation_of_transaction(tx.transaction_id, now=at + 1).explanation
    assert e.predicted_timestamp == at + 30_000
    assert e.reasons == ("check_interval",)


def test_group_backoff_and_down_since(topic, producer_group):
    tx = prepare()
    ProducerGroup.objects.filter(name="G").update(
        check_failures=1, check_backoff_until=tx.born_timestamp + 20_000, unanswered_since=42
    )
    e = check_explanation_of_transaction(tx.transaction_id, now=tx.born_timestamp).explanation
    assert e.predicted_timestamp == tx.born_timestamp + 20_000
    assert e.reasons == ("transaction_timeout", "group_backoff")
    assert e.down_since == 42
    assert "group_down" in e.warnings


def test_the_group_in_flight_cap_counts_the_due_checks_ahead(
    topic, producer_group, broker_settings
):
    broker_settings["HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT"] = 1
    txs = [prepare(body=f"m{i}") for i in range(3)]
    for i, t in enumerate(txs):  # one half queue, all due at 1000
        Transaction.objects.filter(pk=t.pk).update(
            half_queue_id=0, half_queue_offset=1000 + i, next_check_timestamp=1000
        )
    last = max(txs, key=lambda t: t.half_commit_log_offset)
    e = check_explanation_of_transaction(last.transaction_id, now=5000).explanation
    assert e.reasons == ("transaction_timeout", "due", "group_in_flight_cap")
    assert e.predicted_timestamp == 5000 + 2 * 1000  # two scans behind the two ahead
    first = min(txs, key=lambda t: t.half_commit_log_offset)
    assert check_explanation_of_transaction(first.transaction_id, now=5000).explanation.reasons == (
        "transaction_timeout",
        "due",
    )


def test_a_resolved_transaction_has_no_next_check(topic, producer_group):
    tx = prepare()
    Transaction.objects.filter(pk=tx.pk).update(
        state="DISCARDED", resolved_by="discard", resolved_timestamp=1, discard_reason="check_max"
    )
    e = check_explanation_of_transaction(tx.transaction_id).explanation
    assert e.predicted_timestamp is None
    assert e.reasons == ("resolved",)


def test_check_max_reached_is_a_discard(topic, producer_group, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 2
    tx = prepare()
    Transaction.objects.filter(pk=tx.pk).update(check_times=2, last_check_timestamp=1)
    e = check_explanation_of_transaction(tx.transaction_id, now=tx.born_timestamp).explanation
    assert e.outcome == "discard_check_max"
    assert "check_max_discard" in e.warnings


def test_the_group_explains_its_first_due_transaction(topic, producer_group):
    later = prepare(body="later")
    sooner = prepare(body="sooner")
    Transaction.objects.filter(pk=later.pk).update(next_check_timestamp=later.born_timestamp + 9000)
    Transaction.objects.filter(pk=sooner.pk).update(next_check_timestamp=later.born_timestamp + 100)
    got = check_explanation_of_producer_group("G", now=later.born_timestamp)
    assert got.pending == 2
    assert got.next_transaction_id == sooner.transaction_id
    assert got.explanation.predicted_timestamp == later.born_timestamp + 100


def test_a_group_without_pending_transactions(producer_group):
    got = check_explanation_of_producer_group("G")
    assert got.pending == 0
    assert got.next_transaction_id is None
    assert got.explanation.reasons == ("no_pending",)
    assert got.explanation.predicted_timestamp is None


def test_unknown_ids_are_not_found(db):
    with pytest.raises(NotFound) as err:
        check_explanation_of_transaction("nope")
    assert err.value.code == "transaction_not_found"
    with pytest.raises(NotFound) as err:
        check_explanation_of_producer_group("nope")
    assert err.value.code == "producer_group_not_found"
