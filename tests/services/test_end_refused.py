"""Late ends are journalled (broker.services.transactions.end.transaction_end): a producer's or a
check answer's commit or rollback refused because the transaction had already ended answers
409 as before and leaves a ``TransactionEvent`` ``end_refused`` behind; a repeated identical end
is not refused and leaves nothing. The rebuild and /metrics ignore it as a check."""

from __future__ import annotations

import pytest
from django.db import transaction

from broker.errors import TransactionAlreadyResolved
from broker.models import TransactionEvent
from broker.rules.states import DiscardReason
from broker.selectors.timeline import transaction_timeline
from broker.services.recovery import transactions_rebuild
from broker.services.transactions.end import transaction_end, transaction_get_locked
from broker.services.transactions.resolution import transaction_discard
from tests.api_helpers import assert_error, end, send_half
from tests.support import prepare


def _refused(tid: str) -> list[TransactionEvent]:
    return list(TransactionEvent.objects.filter(transaction_id=tid, kind="end_refused"))


def _discard(tid: str) -> None:
    with transaction.atomic():
        transaction_discard(transaction_get_locked(tid), reason=DiscardReason.CHECK_MAX)


@pytest.mark.parametrize("action, outcome", [("commit", "COMMIT"), ("rollback", "ROLLBACK")])
def test_a_producer_end_after_a_discard_is_409_and_journalled(
    producer, topic, producer_group, action, outcome
):
    tid = send_half(producer).json()["transaction_id"]
    _discard(tid)

    error = assert_error(end(producer, tid, action), 409, "transaction_already_resolved")

    assert error["details"]["state"] == "DISCARDED"
    (event,) = _refused(tid)
    assert (event.actor, event.outcome) == ("producer", outcome)
    assert event.detail["state"] == "DISCARDED"
    assert event.detail["resolved_by"] == "discard"
    assert event.detail["resolved_timestamp"] == error["details"]["resolved_timestamp"]
    discarded = TransactionEvent.objects.get(transaction_id=tid, kind="discarded")
    assert event.timestamp >= discarded.timestamp
    assert producer.get(f"/api/v1/transactions/{tid}").json()["state"] == "DISCARDED"


def test_a_check_answer_against_an_ended_transaction_is_journalled_as_check(topic, producer_group):
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    with pytest.raises(TransactionAlreadyResolved):
        transaction_end(
            transaction_id=tx.pk,
            producer_group="G",
            action="rollback",
            from_transaction_check=True,
        )
    (event,) = _refused(tx.pk)
    assert (event.actor, event.outcome) == ("check", "ROLLBACK")
    assert event.detail == {
        "state": "COMMITTED",
        "resolved_by": "producer",
        "resolved_timestamp": event.detail["resolved_timestamp"],
    }


def test_the_same_end_again_is_not_refused_and_journals_nothing(topic, producer_group):
    tx = prepare()
    for _ in range(2):
        assert (
            transaction_end(transaction_id=tx.pk, producer_group="G", action="commit").state
            == "COMMITTED"
        )
    transaction_end(transaction_id=tx.pk, producer_group="G", action="unknown")
    assert _refused(tx.pk) == []
    assert not TransactionEvent.objects.filter(transaction_id=tx.pk).exists()


def test_refused_ends_are_in_the_timeline_and_not_checks(topic, producer_group):
    tx = prepare()
    _discard(tx.pk)
    for action in ("commit", "rollback"):
        with pytest.raises(TransactionAlreadyResolved):
            transaction_end(transaction_id=tx.pk, producer_group="G", action=action)

    entries = [e for e in transaction_timeline(tx.pk) if e.kind == "end_refused"]
    assert [e.title for e in entries] == [
        "Commit from the producer refused: already DISCARDED (by discard)",
        "Rollback from the producer refused: already DISCARDED (by discard)",
    ]
    assert [e.detail["action"] for e in entries] == ["COMMIT", "ROLLBACK"]
    # The rebuild counts check_times from check_sent events only: nothing differs.
    tx.refresh_from_db()
    assert tx.check_times == 0
    assert not transactions_rebuild(dry_run=True).differences
