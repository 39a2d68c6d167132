"""Operator actions (api-v1 ``resolve`` and ``resume-check``): the services in
``broker.services.transactions.operator`` and their admin-only endpoints.

Every scenario ends with a dry-run rebuild (``broker.services.recovery``) that must find the
derived ``Transaction`` rows equal to what the logs say: an operator action leaves its
evidence in the half queue, the resolution journal and the check journal.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_TRANSACTION_COMMIT_TYPE,
    SYS_FLAG_TRANSACTION_PREPARED_TYPE,
)
from broker.errors import Conflict, InvalidInput, NotFound, TransactionAlreadyResolved
from broker.models import (
    AuditEntry,
    AuditTarget,
    CheckRequest,
    Message,
    ProducerGroup,
    Resolution,
    Transaction,
    TransactionEvent,
)
from broker.rules.clock import now_ms
from broker.rules.states import DiscardReason
from broker.services import checks
from broker.services.operations.audit import NO_REASON_GIVEN
from broker.services.recovery import transactions_rebuild
from broker.services.topology.writes import producer_group_create
from broker.services.transactions.end import transaction_end
from broker.services.transactions.operator import (
    transaction_check_now,
    transaction_operator_resolve,
    transaction_resume_check,
)
from broker.services.transactions.resolution import transaction_discard
from tests.api_helpers import assert_error, post
from tests.services.test_races import _run_together
from tests.support import CheckServer, answer_state, prepare, round_at

ACTOR = "operator:owner"

TRANSACTION_FIELDS = {
    "transaction_id",
    "producer_group",
    "topic",
    "tags",
    "keys",
    "state",
    "check_times",
    "born_timestamp",
    "resolved_timestamp",
    "resolved_by",
}


# --- Helpers ------------------------------------------------------------------------------------


def _tx(tx: Transaction) -> Transaction:
    tx.refresh_from_db()
    return tx


def discarded(tx: Transaction, reason: str = DiscardReason.CHECK_MAX) -> Transaction:
    """Discard ``tx`` as the check scan does: locked, inside a database transaction."""
    with transaction.atomic():
        locked = Transaction.objects.select_for_update().get(pk=tx.pk)
        transaction_discard(locked, reason=reason)
    return _tx(tx)


def on_topic(tx: Transaction) -> list[Message]:
    """The copies of ``tx`` delivered to its real topic."""
    return list(Message.objects.filter(topic=tx.topic, msg_id=tx.transaction_id))


def events(tx: Transaction, kind: str) -> list[TransactionEvent]:
    return list(TransactionEvent.objects.filter(transaction_id=tx.pk, kind=kind))


def assert_rebuild_finds_nothing() -> None:
    report = transactions_rebuild(dry_run=True)
    assert report.differences == [], report.as_dict()


@pytest.fixture
def check_server():
    with CheckServer() as server:
        yield server


@pytest.fixture
def http_group(db, check_server, broker_settings) -> ProducerGroup:
    """Producer group G answering back-checks at the check server's URL (no rate limit in the
    way of a test)."""
    broker_settings["HALFMOON_CHECK_GROUP_MAX_PER_SECOND"] = 1_000_000
    group = producer_group_create(name="G", check_url=check_server.url)
    check_server.secrets["G"] = group.check_secret
    return group


# --- Resolve: the service -----------------------------------------------------------------------


def test_operator_commit_of_a_prepared_transaction_delivers_it_once(topic, producer_group):
    tx = prepare(body="order 42 paid", tags="T", keys="K")

    out = transaction_operator_resolve(
        transaction_id=tx.pk, action="commit", reason="producer lost its state", actor=ACTOR
    )

    tx = _tx(tx)
    assert (out.state, tx.state, tx.resolved_by) == ("COMMITTED", "COMMITTED", "operator")
    assert tx.resolved_timestamp is not None and tx.next_check_timestamp is None
    [message] = on_topic(tx)
    assert bytes(message.body) == b"order 42 paid"
    assert (message.tags, message.keys, message.queue_id) == ("T", "K", tx.queue_id)
    assert message.sys_flag == SYS_FLAG_TRANSACTION_COMMIT_TYPE
    assert message.prepared_transaction_offset == tx.half_commit_log_offset
    assert tx.queue_offset == message.queue_offset
    resolution = Resolution.objects.get(transaction=tx)
    assert (resolution.action, resolution.resolved_by) == ("COMMIT", "operator")
    assert resolution.reason == "producer lost its state"
    [event] = events(tx, "resolved")
    assert (event.outcome, event.actor) == ("COMMIT", ACTOR)
    [entry] = AuditEntry.objects.all()
    assert event.detail == {
        "reason": "producer lost its state",
        "previous_state": "PREPARED",
        "via": "api",
        "audit_entry_id": entry.pk,
    }
    assert_rebuild_finds_nothing()


def test_operator_rollback_of_a_prepared_transaction_delivers_nothing(topic, producer_group):
    tx = prepare()

    transaction_operator_resolve(
        transaction_id=tx.pk, action="rollback", reason="order cancelled", actor=ACTOR
    )

    tx = _tx(tx)
    assert (tx.state, tx.resolved_by, tx.queue_offset) == ("ROLLED_BACK", "operator", None)
    assert on_topic(tx) == []
    assert Resolution.objects.get(transaction=tx).action == "ROLLBACK"
    [event] = events(tx, "resolved")
    assert (event.outcome, event.actor, event.detail["reason"]) == (
        "ROLLBACK",
        ACTOR,
        "order cancelled",
    )
    assert_rebuild_finds_nothing()


@pytest.mark.parametrize("action", ["commit", "rollback"])
def test_operator_resolves_a_discarded_transaction_once_and_keeps_its_history(
    topic, producer_group, action
):
    tx = discarded(prepare(body="late order"))
    assert (tx.state, tx.discard_reason) == ("DISCARDED", "check_max")
    assert_rebuild_finds_nothing()

    transaction_operator_resolve(
        transaction_id=tx.pk, action=action, reason="checked by hand", actor=ACTOR
    )

    tx = _tx(tx)
    expected = "COMMITTED" if action == "commit" else "ROLLED_BACK"
    assert (tx.state, tx.resolved_by, tx.discard_reason) == (expected, "operator", "")
    assert len(on_topic(tx)) == (1 if action == "commit" else 0)
    # The discard is still visible: its event, its copy, and the resolution's audit event.
    assert len(events(tx, "discarded")) == 1
    assert Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=tx.pk).count() == 1
    [event] = events(tx, "resolved")
    assert event.actor == ACTOR
    [entry] = AuditEntry.objects.all()
    assert event.detail == {
        "reason": "checked by hand",
        "previous_state": "DISCARDED",
        "discard_reason": "check_max",
        "via": "api",
        "audit_entry_id": entry.pk,
    }
    assert_rebuild_finds_nothing()

    # A second resolve, either way, answers 409 and delivers nothing more.
    for again in ("commit", "rollback"):
        with pytest.raises(TransactionAlreadyResolved) as raised:
            transaction_operator_resolve(
                transaction_id=tx.pk, action=again, reason="again", actor=ACTOR
            )
        assert raised.value.details["state"] == expected
    assert len(on_topic(tx)) == (1 if action == "commit" else 0)
    assert Resolution.objects.filter(transaction=tx).count() == 1
    assert len(events(tx, "resolved")) == 1
    assert_rebuild_finds_nothing()


@pytest.mark.parametrize(
    ("producer_action", "state"), [("commit", "COMMITTED"), ("rollback", "ROLLED_BACK")]
)
def test_a_transaction_the_producer_resolved_cannot_be_resolved_by_an_operator(
    topic, producer_group, producer_action, state
):
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action=producer_action)
    delivered = len(on_topic(tx))

    for action in ("commit", "rollback"):
        with pytest.raises(TransactionAlreadyResolved) as raised:
            transaction_operator_resolve(
                transaction_id=tx.pk, action=action, reason="why", actor=ACTOR
            )
        assert raised.value.code == "transaction_already_resolved"
        assert raised.value.details["state"] == state

    tx = _tx(tx)
    assert (tx.state, tx.resolved_by) == (state, "producer")
    assert len(on_topic(tx)) == delivered
    assert events(tx, "resolved") == []


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_an_operator_resolution_needs_a_reason(topic, producer_group, reason):
    tx = discarded(prepare())

    with pytest.raises(InvalidInput) as raised:
        transaction_operator_resolve(
            transaction_id=tx.pk, action="commit", reason=reason, actor=ACTOR
        )

    assert raised.value.code == "reason_required"
    tx = _tx(tx)
    assert tx.state == "DISCARDED" and on_topic(tx) == []


def test_an_operator_resolution_refuses_other_actions_and_unknown_ids(topic, producer_group):
    tx = prepare()
    with pytest.raises(InvalidInput) as raised:
        transaction_operator_resolve(
            transaction_id=tx.pk,
            action="unknown",  # type: ignore[arg-type]
            reason="why",
            actor=ACTOR,
        )
    assert raised.value.code == "invalid_action"
    with pytest.raises(NotFound) as missing:
        transaction_operator_resolve(
            transaction_id="NOPE", action="commit", reason="why", actor=ACTOR
        )
    assert missing.value.code == "transaction_not_found"
    assert _tx(tx).state == "PREPARED"


def test_an_end_refuses_an_action_that_is_none_of_the_three(topic, producer_group):
    tx = prepare()
    with pytest.raises(InvalidInput) as raised:
        transaction_end(
            transaction_id=tx.pk,
            producer_group="G",
            action="COMMIT_MESSAGE",  # type: ignore[arg-type]  # a check answer, not an action
        )
    assert raised.value.code == "invalid_action"
    assert raised.value.details == {"action": "COMMIT_MESSAGE"}
    assert _tx(tx).state == "PREPARED"
    assert not Resolution.objects.filter(transaction_id=tx.pk).exists()


def test_an_operator_resolution_journals_the_resolution_spelling_of_its_action(
    topic, producer_group
):
    committed, rolled_back = prepare(), prepare()
    transaction_operator_resolve(
        transaction_id=committed.pk, action="commit", reason="paid", actor=ACTOR
    )
    transaction_operator_resolve(
        transaction_id=rolled_back.pk, action="rollback", reason="cancelled", actor=ACTOR
    )

    outcomes = dict(
        TransactionEvent.objects.filter(kind="resolved").values_list("transaction_id", "outcome")
    )
    assert outcomes == {committed.pk: "COMMIT", rolled_back.pk: "ROLLBACK"}
    assert Resolution.objects.get(transaction_id=committed.pk).action == "COMMIT"
    assert Resolution.objects.get(transaction_id=rolled_back.pk).action == "ROLLBACK"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("start", ["PREPARED", "DISCARDED"])
def test_concurrent_operator_resolutions_leave_exactly_one(topic, producer_group, start):
    tx = prepare()
    if start == "DISCARDED":
        tx = discarded(tx)
    actions = ["commit", "rollback"] * 4
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = transaction_operator_resolve(
                transaction_id=tx.pk, action=actions[i], reason=f"operator {i}", actor=f"op:{i}"
            ).state
        except BaseException as exc:  # noqa: BLE001 - asserted below
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)

    won = [r for r in results if isinstance(r, str)]
    lost = [r for r in results if not isinstance(r, str)]
    assert len(won) == 1, results
    assert all(isinstance(r, TransactionAlreadyResolved) for r in lost), results
    assert {r.details["state"] for r in lost} == set(won)
    tx = _tx(tx)
    assert tx.state == won[0]
    assert len(on_topic(tx)) == (1 if won[0] == "COMMITTED" else 0)
    assert Resolution.objects.filter(transaction=tx).count() == 1
    assert len(events(tx, "resolved")) == 1
    assert_rebuild_finds_nothing()


# --- Resume-check: the service ------------------------------------------------------------------


def test_resume_puts_a_discarded_transaction_back_with_check_times_zero(topic, producer_group):
    tx = prepare(body="resume me", tags="T", keys="K", check_immunity_seconds=60)
    Transaction.objects.filter(pk=tx.pk).update(undelivered_checks=2)
    tx = discarded(tx)
    old_half = Message.objects.get(pk=tx.half_commit_log_offset)
    old_offset = tx.half_queue_offset

    before = now_ms()
    out = transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)

    tx = _tx(tx)
    assert out.state == tx.state == "PREPARED"
    assert (tx.check_times, tx.undelivered_checks) == (0, 0)
    assert (tx.resolved_by, tx.resolved_timestamp, tx.discard_reason) == (None, None, "")
    assert tx.born_timestamp == old_half.born_timestamp  # kept (file reserved time)
    assert before <= tx.next_check_timestamp <= now_ms()  # due at once
    # A new half message on the same half queue, with the same msg_id and content.
    halves = list(
        Message.objects.filter(topic=HALF_TOPIC, msg_id=tx.pk).order_by("commit_log_offset")
    )
    assert [h.commit_log_offset for h in halves] == [
        old_half.commit_log_offset,
        tx.half_commit_log_offset,
    ]
    new_half = halves[-1]
    assert (new_half.queue_id, new_half.queue_offset) == (tx.half_queue_id, tx.half_queue_offset)
    assert tx.half_queue_offset > old_offset
    assert new_half.sys_flag == SYS_FLAG_TRANSACTION_PREPARED_TYPE
    assert bytes(new_half.body) == b"resume me"
    assert (new_half.tags, new_half.keys) == ("T", "K")
    assert new_half.properties == old_half.properties
    assert new_half.properties[PROPERTY_UNIQ_KEY] == tx.pk
    assert new_half.born_timestamp == old_half.born_timestamp
    [event] = events(tx, "resumed")
    assert (event.actor, event.check_times) == (ACTOR, 0)
    assert event.detail["discard_reason"] == "check_max"
    assert event.detail["previous_half_queue_offset"] == old_offset
    assert_rebuild_finds_nothing()


@pytest.mark.parametrize("state", ["PREPARED", "COMMITTED", "ROLLED_BACK"])
def test_only_a_discarded_transaction_can_be_resumed(topic, producer_group, state):
    tx = prepare()
    if state != "PREPARED":
        action = "commit" if state == "COMMITTED" else "rollback"
        transaction_end(transaction_id=tx.pk, producer_group="G", action=action)

    with pytest.raises(Conflict) as raised:
        transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)

    assert raised.value.code == "transaction_not_discarded"
    assert raised.value.details["state"] == state
    assert _tx(tx).state == state
    assert Message.objects.filter(topic=HALF_TOPIC, msg_id=tx.pk).count() == 1
    assert events(tx, "resumed") == []
    with pytest.raises(NotFound):
        transaction_resume_check(transaction_id="NOPE", actor=ACTOR)


def test_a_resumed_transaction_is_checked_and_committed_by_the_check_answer(
    topic, http_group, check_server, broker_settings
):
    """The whole life: checked to the limit and discarded on the real clock, resumed, checked
    again from 1 at the next scan, committed by the producer's answer."""
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 100
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 2
    tx = prepare(body="checked twice")
    for _ in range(3):
        checks.check_round(half_queue_id=tx.half_queue_id)
        time.sleep(0.15)
    tx = _tx(tx)
    assert (tx.state, tx.check_times, tx.discard_reason) == ("DISCARDED", 2, "check_max")
    assert [r.body["check_times"] for r in check_server.received()] == [1, 2]
    assert_rebuild_finds_nothing()

    transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)
    assert_rebuild_finds_nothing()
    check_server.clear()
    check_server.answer = answer_state("COMMIT_MESSAGE")

    result = checks.check_round(half_queue_id=tx.half_queue_id)

    assert (result["sent"], result["committed"]) == (1, 1)
    [check] = check_server.received()
    assert check.signature_valid
    tx = _tx(tx)
    assert check.body["transaction_id"] == tx.pk
    assert check.body["check_times"] == 1
    assert check.body["half_queue_offset"] == tx.half_queue_offset
    assert check.body["commit_log_offset"] == tx.half_commit_log_offset
    assert check.body["body"] == "checked twice"
    assert (tx.state, tx.resolved_by, tx.check_times) == ("COMMITTED", "check", 1)
    [message] = on_topic(tx)
    assert message.prepared_transaction_offset == tx.half_commit_log_offset
    assert_rebuild_finds_nothing()
    # Resolved: never checked again, and resume-check is refused.
    checks.check_round(half_queue_id=tx.half_queue_id)
    assert len(check_server.received()) == 1
    with pytest.raises(Conflict):
        transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)


def test_a_resumed_transaction_is_discarded_again_after_check_max(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 100
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    tx = discarded(prepare())
    transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)

    for _ in range(4):  # on the real clock: the journal's order is the clock's
        checks.check_round(half_queue_id=tx.half_queue_id)
        time.sleep(0.15)

    tx = _tx(tx)
    assert (tx.state, tx.resolved_by, tx.discard_reason) == ("DISCARDED", "discard", "check_max")
    assert tx.check_times == 3
    assert [r.body["check_times"] for r in check_server.received()] == [1, 2, 3]
    assert Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=tx.pk).count() == 2
    assert len(events(tx, "discarded")) == 2
    assert on_topic(tx) == []
    assert_rebuild_finds_nothing()

    # It can be resumed again, or resolved by hand.
    transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)
    transaction_operator_resolve(transaction_id=tx.pk, action="commit", reason="ok", actor=ACTOR)
    assert len(on_topic(_tx(tx))) == 1
    assert_rebuild_finds_nothing()


def test_a_resumed_transaction_older_than_file_reserved_hours_is_discarded_again_at_once(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_FILE_RESERVED_HOURS"] = 1
    tx = discarded(prepare(), reason=DiscardReason.FILE_RESERVED_TIME)
    transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)

    round_at(tx.half_queue_id, _tx(tx).born_timestamp + 3_600_001)

    tx = _tx(tx)
    assert (tx.state, tx.discard_reason, tx.check_times) == (
        "DISCARDED",
        "file_reserved_time",
        0,
    )
    assert check_server.received() == []  # discarded unchecked, as RocketMQ does


def test_resume_drops_the_queued_poll_requests_of_the_earlier_checks(topic, producer_group):
    tx = prepare()
    CheckRequest.objects.create(transaction=tx, producer_group="G")  # nobody took it
    tx = discarded(tx, reason=DiscardReason.FILE_RESERVED_TIME)

    transaction_resume_check(transaction_id=tx.pk, actor=ACTOR)

    assert not CheckRequest.objects.filter(transaction=tx).exists()
    jobs, due = checks.check_claim(half_queue_id=tx.half_queue_id)
    assert (jobs, due) == ([], 1)
    assert CheckRequest.objects.filter(transaction=tx, delivered_timestamp=None).count() == 1
    assert ProducerGroup.objects.get(name="G").unreachable_since is None
    [request] = checks.check_requests_poll(producer_group="G")
    assert (request["transaction_id"], request["check_times"]) == (tx.pk, 1)
    assert request["half_queue_offset"] == _tx(tx).half_queue_offset


# --- The endpoints ------------------------------------------------------------------------------


def resolve_url(transaction_id: str) -> str:
    return f"/api/v1/transactions/{transaction_id}/resolve"


def resume_url(transaction_id: str) -> str:
    return f"/api/v1/transactions/{transaction_id}/resume-check"


@pytest.mark.parametrize("action", ["commit", "rollback"])
def test_resolve_answers_the_transaction_object(owner, topic, producer_group, action):
    tx = discarded(prepare())

    response = post(owner, resolve_url(tx.pk), {"action": action, "reason": "support ticket 7"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) >= TRANSACTION_FIELDS
    assert body == owner.get(f"/api/v1/transactions/{tx.pk}").json()
    assert body["state"] == ("COMMITTED" if action == "commit" else "ROLLED_BACK")
    assert body["resolved_by"] == "operator"
    assert body["resolved_timestamp"] is not None
    assert len(on_topic(tx)) == (1 if action == "commit" else 0)
    [event] = events(tx, "resolved")
    assert (event.actor, event.detail["reason"]) == ("operator:owner", "support ticket 7")

    again = post(owner, resolve_url(tx.pk), {"action": "commit", "reason": "once more"})
    error = assert_error(again, 409, "transaction_already_resolved")
    assert error["details"]["state"] == body["state"]
    assert len(on_topic(tx)) == (1 if action == "commit" else 0)


def test_resolve_of_a_prepared_transaction(owner, topic, producer_group):
    tx = prepare()

    response = post(owner, resolve_url(tx.pk), {"action": "commit", "reason": "by hand"})

    assert response.status_code == 200
    assert (response.json()["state"], response.json()["resolved_by"]) == ("COMMITTED", "operator")
    assert len(on_topic(tx)) == 1


@pytest.mark.parametrize(
    "data",
    [
        {"action": "commit"},
        {"action": "commit", "reason": None},
        {"action": "commit", "reason": ""},
        {"action": "rollback", "reason": "   "},
    ],
    ids=["missing", "null", "empty", "blank"],
)
def test_resolve_without_a_reason_is_400(owner, topic, producer_group, data):
    tx = discarded(prepare())

    error = assert_error(post(owner, resolve_url(tx.pk), data), 400, "reason_required")

    assert error["details"]["transaction_id"] == tx.pk
    assert _tx(tx).state == "DISCARDED"


@pytest.mark.parametrize(
    "data",
    [
        {"action": "unknown", "reason": "why"},
        {"action": "delete", "reason": "why"},
        {"reason": "why"},
        {"action": "commit", "reason": "x" * 1025},
        ["commit"],
    ],
    ids=["unknown", "delete", "no-action", "long-reason", "list"],
)
def test_resolve_with_bad_input_is_400(owner, topic, producer_group, data):
    tx = prepare()

    assert_error(post(owner, resolve_url(tx.pk), data), 400, "invalid_input")

    assert _tx(tx).state == "PREPARED"


def test_resolve_and_resume_of_an_unknown_transaction_are_404(owner, db):
    assert_error(
        post(owner, resolve_url("NOPE"), {"action": "commit", "reason": "why"}),
        404,
        "transaction_not_found",
    )
    assert_error(post(owner, resume_url("NOPE")), 404, "transaction_not_found")


def test_resolve_of_a_producer_committed_transaction_is_409(owner, topic, producer_group):
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")

    response = post(owner, resolve_url(tx.pk), {"action": "rollback", "reason": "undo"})

    error = assert_error(response, 409, "transaction_already_resolved")
    assert error["details"]["state"] == "COMMITTED"
    assert _tx(tx).state == "COMMITTED"


@pytest.mark.parametrize("who", ["producer", "consumer", "outsider"])
def test_only_an_admin_key_may_resolve_or_resume(request, topic, producer_group, who):
    client = request.getfixturevalue(who)
    tx = discarded(prepare())

    assert_error(
        post(client, resolve_url(tx.pk), {"action": "commit", "reason": "why"}),
        403,
        "permission_denied",
    )
    assert_error(post(client, resume_url(tx.pk)), 403, "permission_denied")
    assert_error(
        post(client, resolve_url("NOPE"), {"action": "commit", "reason": "why"}),
        403,
        "permission_denied",
    )
    assert _tx(tx).state == "DISCARDED" and on_topic(tx) == []


def test_resolve_and_resume_need_an_access_key(anonymous, topic, producer_group):
    tx = discarded(prepare())

    assert_error(
        post(anonymous, resolve_url(tx.pk), {"action": "commit", "reason": "why"}),
        401,
        "not_authenticated",
    )
    assert_error(post(anonymous, resume_url(tx.pk)), 401, "not_authenticated")


def test_resume_check_answers_the_prepared_transaction(owner, topic, producer_group):
    tx = discarded(prepare())

    response = post(owner, resume_url(tx.pk))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body == owner.get(f"/api/v1/transactions/{tx.pk}").json()
    assert (body["state"], body["check_times"], body["resolved_by"]) == ("PREPARED", 0, None)
    assert body["resolved_timestamp"] is None
    assert events(tx, "resumed")[0].actor == "operator:owner"
    assert Message.objects.filter(topic=HALF_TOPIC, msg_id=tx.pk).count() == 2

    error = assert_error(post(owner, resume_url(tx.pk)), 409, "transaction_not_discarded")
    assert error["details"]["state"] == "PREPARED"
    assert Message.objects.filter(topic=HALF_TOPIC, msg_id=tx.pk).count() == 2
    assert_rebuild_finds_nothing()


def test_the_schema_documents_the_operator_endpoints(anonymous, db):
    schema = anonymous.get("/api/schema/?format=json").json()

    for path in (
        "/api/v1/transactions/{transaction_id}/resolve",
        "/api/v1/transactions/{transaction_id}/resume-check",
    ):
        operation = schema["paths"][path]["post"]
        assert {"200", "400", "401", "403", "404", "409"} <= set(operation["responses"])
    resolve = schema["paths"]["/api/v1/transactions/{transaction_id}/resolve"]["post"]
    ref = resolve["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert set(body["required"]) == {"action", "reason"}


def test_resolve_and_resume_answer_only_post(owner, topic, producer_group):
    tx = prepare()

    for url in (resolve_url(tx.pk), resume_url(tx.pk)):
        assert_error(owner.get(url), 405, "method_not_allowed")
        assert_error(owner.put(url, {}, format="json"), 405, "method_not_allowed")
    assert _tx(tx).state == "PREPARED"


# --- What ended it: the refusal names the winner ------------------------------------------------


def test_a_refused_resolve_names_the_producer_that_ended_it_and_is_audited(topic, producer_group):
    tx = prepare()
    transaction_end(transaction_id=tx.pk, producer_group="G", action="commit")
    tx = _tx(tx)

    with pytest.raises(TransactionAlreadyResolved) as raised:
        transaction_operator_resolve(
            transaction_id=tx.pk,
            action="rollback",
            reason="stuck?",
            actor="console:alice",
            via="console",
        )

    details = raised.value.details
    assert (details["state"], details["resolved_by"]) == ("COMMITTED", "producer")
    assert details["resolved_timestamp"] == tx.resolved_timestamp
    assert details["ended_by"].startswith("its producer at ")
    assert "already COMMITTED by its producer at" in raised.value.message
    [entry] = AuditEntry.objects.all()
    assert (entry.actor, entry.via, entry.action, entry.state) == (
        "console:alice",
        "console",
        "rollback",
        "refused",
    )
    [target] = entry.targets.all()
    assert (target.transaction_id, target.result) == (tx.pk, "already_ended")
    assert target.detail["resolved_by"] == "producer"


def test_a_refusal_after_an_operator_names_the_operator_and_the_reason(topic, producer_group):
    tx = prepare()
    transaction_operator_resolve(
        transaction_id=tx.pk,
        action="rollback",
        reason="duplicate order",
        actor="console:bob",
        via="console",
    )
    for attempt in (
        lambda: transaction_operator_resolve(
            transaction_id=tx.pk, action="commit", reason="x", actor=ACTOR
        ),
        lambda: transaction_check_now(transaction_id=tx.pk, reason="x", actor=ACTOR),
    ):
        with pytest.raises(TransactionAlreadyResolved) as raised:
            attempt()
        details = raised.value.details
        assert (details["resolved_by"], details["actor"], details["reason"]) == (
            "operator",
            "console:bob",
            "duplicate order",
        )
        assert "operator console:bob (reason: duplicate order)" in raised.value.message
    with pytest.raises(Conflict) as resumed:
        transaction_resume_check(transaction_id=tx.pk, actor=ACTOR, reason="x")
    assert resumed.value.code == "transaction_not_discarded"
    assert resumed.value.details["actor"] == "console:bob"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operator_action", ["commit", "rollback"])
def test_a_producer_end_racing_an_operator_action_resolves_once_and_the_loser_sees_who_won(
    topic, producer_group, operator_action
):
    """Real threads on real PostgreSQL: a producer's end and an operator's action on one
    PREPARED transaction, released together, 10 rounds. Exactly one Resolution; the operator
    either won (resolved_by operator) or was refused naming the producer."""
    producer_wins = operator_wins = 0
    for i in range(10):
        tx = prepare()
        results = _run_together(
            [
                functools.partial(
                    transaction_end, transaction_id=tx.pk, producer_group="G", action="commit"
                ),
                functools.partial(
                    transaction_operator_resolve,
                    transaction_id=tx.pk,
                    action=operator_action,
                    reason=f"race {i}",
                    actor="console:carol",
                    via="console",
                ),
            ]
        )
        tx = _tx(tx)
        [resolution] = Resolution.objects.filter(transaction=tx)
        producer_result, operator_result = results
        if tx.resolved_by == "producer":
            producer_wins += 1
            assert isinstance(operator_result, TransactionAlreadyResolved), results
            assert operator_result.details["resolved_by"] == "producer"
            assert operator_result.details["state"] == "COMMITTED"
            assert "by its producer at" in operator_result.message
            assert AuditTarget.objects.get(transaction_id=tx.pk).result == "already_ended"
        else:
            operator_wins += 1
            assert tx.resolved_by == "operator", results
            assert isinstance(operator_result, Transaction), results
            if operator_action == "rollback":
                assert isinstance(producer_result, TransactionAlreadyResolved), results
            assert AuditTarget.objects.get(transaction_id=tx.pk).result == "done"
        assert resolution.resolved_by == tx.resolved_by
        assert len(on_topic(tx)) == (1 if tx.state == "COMMITTED" else 0)
        assert len(events(tx, "resolved")) == (1 if tx.resolved_by == "operator" else 0)
    assert producer_wins + operator_wins == 10
    assert_rebuild_finds_nothing()


# --- Check now ----------------------------------------------------------------------------------


def test_check_now_makes_a_prepared_transaction_due_without_counting_a_check(
    topic, http_group, check_server
):
    tx = prepare(check_immunity_seconds=3600)
    before = now_ms()
    assert round_at(tx.half_queue_id, before)["jobs"] == []  # immune for an hour

    out = transaction_check_now(
        transaction_id=tx.pk, reason="producer is back", actor="console:dan", via="console"
    )

    tx = _tx(tx)
    assert out.state == tx.state == "PREPARED" and tx.check_times == 0
    assert before <= tx.next_check_timestamp <= now_ms()
    [event] = events(tx, "check_requested")
    [entry] = AuditEntry.objects.all()
    assert (event.actor, event.check_times) == ("console:dan", 0)
    assert event.detail["reason"] == "producer is back"
    assert event.detail["audit_entry_id"] == entry.pk
    assert (entry.action, entry.via, entry.state) == ("check-now", "console", "done")
    assert_rebuild_finds_nothing()

    check_server.answer = answer_state("COMMIT_MESSAGE")
    round_at(tx.half_queue_id, now_ms())
    tx = _tx(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("COMMITTED", "check", 1)
    assert [r.body["check_times"] for r in check_server.received()] == [1]


def test_check_now_needs_a_reason_and_a_prepared_transaction(topic, producer_group):
    tx = discarded(prepare())
    with pytest.raises(InvalidInput) as missing:
        transaction_check_now(transaction_id=tx.pk, reason=" ", actor=ACTOR)
    assert missing.value.code == "reason_required"
    with pytest.raises(Conflict) as refused:
        transaction_check_now(transaction_id=tx.pk, reason="why", actor=ACTOR)
    assert refused.value.code == "transaction_not_prepared"
    assert refused.value.details["resolved_by"] == "discard"
    assert "check_max" in refused.value.details["ended_by"]
    assert events(tx, "check_requested") == []
    [entry] = AuditEntry.objects.all()  # the refusal, not the missing reason
    assert (entry.state, entry.targets.get().result) == ("refused", "failed")


# --- The API's operator endpoints are audited ---------------------------------------------------


def test_api_resolve_and_resume_are_in_the_audit_log(owner, topic, producer_group):
    tx = discarded(prepare())
    r = post(owner, f"/api/v1/transactions/{tx.pk}/resume-check", {"reason": "retry after fix"})
    assert r.status_code == 200, r.content
    other = discarded(prepare())
    assert post(owner, f"/api/v1/transactions/{other.pk}/resume-check").status_code == 200
    r = post(owner, f"/api/v1/transactions/{tx.pk}/resolve", {"action": "commit", "reason": "ok"})
    assert r.status_code == 200, r.content
    r = post(owner, f"/api/v1/transactions/{tx.pk}/resolve", {"action": "commit", "reason": "2"})
    assert r.status_code == 409
    body = r.json()["error"]
    assert body["code"] == "transaction_already_resolved"
    assert (body["details"]["state"], body["details"]["resolved_by"]) == ("COMMITTED", "operator")
    assert body["details"]["actor"] == "operator:owner" and body["details"]["reason"] == "ok"

    rows = list(
        AuditEntry.objects.order_by("id").values_list("actor", "via", "action", "reason", "state")
    )
    assert rows == [
        ("operator:owner", "api", "resume-check", "retry after fix", "done"),
        ("operator:owner", "api", "resume-check", NO_REASON_GIVEN, "done"),
        ("operator:owner", "api", "commit", "ok", "done"),
        ("operator:owner", "api", "commit", "2", "refused"),
    ]
    [resumed] = events(tx, "resumed")
    assert resumed.detail["reason"] == "retry after fix"
