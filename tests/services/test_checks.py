"""Back-check scan rules (api-v1 "Back-check: broker to producer") against a real HTTP check
server. Time is moved by passing ``now`` to the round, never by sleeping."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from django.db import connection

from broker.constants import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    PROPERTY_DISCARD_REASON,
    PROPERTY_TRANSACTION_CHECK_TIMES,
)
from broker.errors import TransactionAlreadyResolved
from broker.models import (
    CheckRequest,
    Message,
    ProducerGroup,
    Resolution,
    ScanLease,
    Transaction,
    TransactionEvent,
    now_ms,
)
from broker.services import checks
from broker.services.admin import producer_group_create
from broker.services.transactions import transaction_end, transaction_prepare
from tasks.checks import check_half_queue
from tests.support import (
    CheckServer,
    answer_state,
    closed_port_url,
    due_at,
    expected_signature,
    prepare,
    round_at,
    round_for,
)

CONTRACT_FIELDS = {
    "transaction_id",
    "msg_id",
    "producer_group",
    "topic",
    "tags",
    "keys",
    "properties",
    "check_times",
    "commit_log_offset",
    "half_queue_offset",
    "born_timestamp",
}

INTERVAL = 30_000  # HALFMOON_TRANSACTION_CHECK_INTERVAL_MS default


@pytest.fixture
def check_server():
    with CheckServer() as server:
        yield server


@pytest.fixture
def http_group(db, check_server) -> ProducerGroup:
    """Producer group G answering back-checks at the check server's URL."""
    group = producer_group_create(name="G", check_url=check_server.url)
    check_server.secrets["G"] = group.check_secret
    return group


def _tx(tx: Transaction) -> Transaction:
    tx.refresh_from_db()
    return tx


def _delivered(tx: Transaction) -> list[Message]:
    return list(Message.objects.filter(topic=tx.topic, msg_id=tx.transaction_id))


# --- When checks are due ----------------------------------------------------------------------


def test_no_check_before_the_transaction_timeout(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 6000
    tx = prepare()
    born = tx.born_timestamp

    assert round_for(tx, born)["due"] == 0
    assert round_for(tx, born + 5999)["due"] == 0
    assert check_server.received() == []
    assert _tx(tx).check_times == 0

    result = round_for(tx, born + 6000)
    assert result["due"] == 1
    assert check_server.received_ids() == [tx.transaction_id]
    assert check_server.received()[0].body["check_times"] == 1
    assert _tx(tx).check_times == 1


def test_check_immunity_delays_the_first_check(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 6000
    tx = prepare(check_immunity_seconds=60)
    born = tx.born_timestamp

    round_for(tx, born + 6000)
    round_for(tx, born + 59_999)
    assert check_server.received() == []
    assert _tx(tx).check_times == 0  # the immunity window consumes no check

    round_for(tx, born + 60_000)
    assert check_server.received_ids() == [tx.transaction_id]
    assert check_server.received()[0].body["check_times"] == 1


def test_immunity_below_the_timeout_is_raised_to_it(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 6000
    tx = prepare(check_immunity_seconds=1)
    born = tx.born_timestamp

    round_for(tx, born + 1000)
    round_for(tx, born + 5999)
    assert check_server.received() == []

    round_for(tx, born + 6000)
    assert check_server.received_ids() == [tx.transaction_id]


def test_at_most_one_check_per_interval(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = INTERVAL
    tx = prepare()
    due = due_at(tx)

    for now in (due, due + 1, due + 1000, due + INTERVAL - 1):
        round_for(tx, now)
    assert check_server.received_ids() == [tx.transaction_id]
    assert _tx(tx).check_times == 1

    round_for(tx, due + INTERVAL)
    round_for(tx, due + INTERVAL + 5)
    assert check_server.received_ids() == [tx.transaction_id] * 2
    assert [r.body["check_times"] for r in check_server.received()] == [1, 2]
    assert _tx(tx).check_times == 2
    sent = TransactionEvent.objects.filter(
        transaction_id=tx.pk, kind=TransactionEvent.Kind.CHECK_SENT
    )
    assert [e.check_times for e in sent] == [1, 2]


# --- What a check carries ---------------------------------------------------------------------


def test_check_body_has_every_contract_field_and_a_valid_signature(topic, http_group, check_server):
    tx = prepare(tags="TagA", keys="k1 k2", body="order 42", properties={"color": "red"})
    round_for(tx, due_at(tx))

    [request] = check_server.received()
    body = request.body
    assert set(body) == CONTRACT_FIELDS | {"body"}
    half = Message.objects.get(pk=tx.half_commit_log_offset)
    assert half.topic == HALF_TOPIC
    assert body == {
        "transaction_id": tx.transaction_id,
        "msg_id": tx.transaction_id,
        "producer_group": "G",
        "topic": "TranTest",
        "tags": "TagA",
        "keys": "k1 k2",
        "body": "order 42",
        "properties": {"color": "red"},
        "check_times": 1,
        "commit_log_offset": half.commit_log_offset,
        "half_queue_offset": tx.half_queue_offset,
        "born_timestamp": tx.born_timestamp,
    }
    assert request.headers["Content-Type"] == "application/json"
    assert request.signature_valid is True
    assert request.headers["X-Halfmoon-Signature"] == expected_signature(
        http_group.check_secret, request.raw
    )
    # The signature really depends on the secret (the check above can fail).
    assert request.headers["X-Halfmoon-Signature"] != expected_signature("wrong", request.raw)


def test_check_body_of_a_binary_message_is_base64(topic, http_group, check_server):
    raw = bytes(range(256))
    tx, _ = transaction_prepare(producer_group="G", topic="TranTest", body=raw, body_is_text=False)
    round_for(tx, due_at(tx))

    [request] = check_server.received()
    assert set(request.body) == CONTRACT_FIELDS | {"body_base64"}
    assert base64.b64decode(request.body["body_base64"]) == raw
    assert request.signature_valid is True


# --- Answers ----------------------------------------------------------------------------------


def test_commit_answer_commits_once_resolved_by_check(topic, http_group, check_server):
    check_server.answer = answer_state("COMMIT_MESSAGE")
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)

    tx = _tx(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("COMMITTED", "check", 1)
    [delivered] = _delivered(tx)
    assert delivered.queue_offset == tx.queue_offset
    resolution = Resolution.objects.get(transaction=tx)
    assert (resolution.action, resolution.resolved_by) == ("COMMIT", "check")

    # Later rounds send nothing and deliver nothing again.
    round_for(tx, due + INTERVAL)
    round_for(tx, due + 10 * INTERVAL)
    assert len(check_server.received()) == 1
    assert len(_delivered(tx)) == 1


def test_rollback_answer_rolls_back(topic, http_group, check_server):
    check_server.answer = answer_state("ROLLBACK_MESSAGE")
    tx = prepare()
    round_for(tx, due_at(tx))

    tx = _tx(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("ROLLED_BACK", "check", 1)
    assert _delivered(tx) == []
    assert Resolution.objects.get(transaction=tx).action == "ROLLBACK"


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param((200, {"state": "UNKNOW"}), id="UNKNOW"),
        pytest.param((200, {"state": "UNKNOWN"}), id="UNKNOWN"),
        pytest.param((200, b"garbage, not json"), id="garbage"),
        pytest.param((200, {"state": "commit"}), id="unknown-state-name"),
        pytest.param((200, ["COMMIT_MESSAGE"]), id="json-list"),
        pytest.param((200, {}), id="no-state"),
        pytest.param((500, {"state": "COMMIT_MESSAGE"}), id="http-500"),
        pytest.param((404, b"not found"), id="http-404"),
        pytest.param((301, b""), id="redirect"),
    ],
)
def test_answers_that_count_as_unknow(topic, http_group, check_server, answer):
    check_server.answer = lambda check: answer
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)

    tx = _tx(tx)
    assert (tx.state, tx.check_times, tx.resolved_by) == ("PREPARED", 1, None)
    assert _delivered(tx) == []
    assert not Resolution.objects.filter(transaction=tx).exists()

    # Asked again one interval later, with the count of this second check.
    round_for(tx, due + INTERVAL)
    assert [r.body["check_times"] for r in check_server.received()] == [1, 2]
    assert _tx(tx).check_times == 2


def test_read_timeout_after_sending_counts_as_unknow(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    answered = threading.Event()

    def slow(check):
        time.sleep(1.5)
        answered.set()
        return 200, {"state": "COMMIT_MESSAGE"}

    check_server.answer = slow
    tx = prepare()
    result = round_for(tx, due_at(tx))

    [outcome] = result["outcomes"]
    assert outcome.delivered is True
    assert outcome.action == "unknown"
    tx = _tx(tx)
    assert (tx.state, tx.check_times) == ("PREPARED", 1)
    assert len(check_server.received()) == 1
    # The late COMMIT answer is not applied: the broker stopped listening.
    answered.wait(5)
    assert _tx(tx).state == "PREPARED"
    assert _delivered(tx) == []


def test_202_leaves_it_prepared_until_end_from_transaction_check(
    topic, http_group, check_server, producer
):
    check_server.answer = lambda check: (202, b"")
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)

    tx = _tx(tx)
    assert (tx.state, tx.check_times) == ("PREPARED", 1)

    response = producer.post(
        f"/api/v1/transactions/{tx.transaction_id}/end",
        {"producer_group": "G", "action": "commit", "from_transaction_check": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "COMMITTED"
    tx = _tx(tx)
    assert (tx.state, tx.resolved_by) == ("COMMITTED", "check")
    assert len(_delivered(tx)) == 1

    detail = producer.get(f"/api/v1/transactions/{tx.transaction_id}").json()
    assert (detail["state"], detail["resolved_by"], detail["check_times"]) == (
        "COMMITTED",
        "check",
        1,
    )

    round_for(tx, due + INTERVAL)
    assert len(check_server.received()) == 1


def test_never_a_check_after_the_producer_resolved(topic, http_group, check_server):
    tx = prepare()
    due = due_at(tx)
    round_for(tx, due)
    assert len(check_server.received()) == 1

    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="rollback")
    for k in range(1, 6):
        assert round_for(tx, due + k * INTERVAL)["due"] == 0
    assert len(check_server.received()) == 1
    tx = _tx(tx)
    assert (tx.state, tx.resolved_by, tx.check_times) == ("ROLLED_BACK", "producer", 1)


def test_a_commit_answer_after_a_producer_rollback_is_not_applied(topic, http_group, check_server):
    """The producer rolls back while a check is in flight whose answer is COMMIT."""
    tx = prepare()

    def commit_after_rollback(check):
        return 200, {"state": "COMMIT_MESSAGE"}

    check_server.answer = commit_after_rollback
    jobs, _ = checks.check_claim(half_queue_id=tx.half_queue_id, now=due_at(tx))
    outcomes = checks.checks_send(jobs)
    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="rollback")
    checks.check_outcomes_apply(outcomes, now=due_at(tx))

    tx = _tx(tx)
    assert (tx.state, tx.resolved_by) == ("ROLLED_BACK", "producer")
    assert _delivered(tx) == []
    assert Resolution.objects.filter(transaction=tx).count() == 1


# --- Discards ---------------------------------------------------------------------------------


def test_check_max_then_discarded(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 3
    tx = prepare(tags="T", keys="K")
    due = due_at(tx)
    for k in range(3):
        round_for(tx, due + k * INTERVAL)
    tx = _tx(tx)
    assert (tx.state, tx.check_times) == ("PREPARED", 3)

    result = round_for(tx, due + 3 * INTERVAL)
    assert result["due"] == 1 and result["jobs"] == []

    tx = _tx(tx)
    assert (tx.state, tx.resolved_by, tx.discard_reason) == ("DISCARDED", "discard", "check_max")
    assert tx.check_times == 3
    assert tx.resolved_timestamp is not None
    assert len(check_server.received()) == 3
    assert _delivered(tx) == []
    assert not Resolution.objects.filter(transaction=tx).exists()
    [copy] = Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=tx.transaction_id)
    assert bytes(copy.body) == b"hello"
    assert (copy.tags, copy.keys) == ("T", "K")
    assert copy.properties[PROPERTY_DISCARD_REASON] == "check_max"
    assert copy.properties[PROPERTY_TRANSACTION_CHECK_TIMES] == "3"
    assert TransactionEvent.objects.filter(transaction_id=tx.pk, kind="discarded").count() == 1

    # Never checked or delivered afterwards; a producer commit is refused.
    for k in range(4, 8):
        round_for(tx, due + k * INTERVAL)
    assert len(check_server.received()) == 3
    with pytest.raises(TransactionAlreadyResolved):
        transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="commit")
    assert _delivered(tx) == []
    assert Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=tx.transaction_id).count() == 1


def test_older_than_file_reserved_hours_is_discarded_whatever_its_count(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_FILE_RESERVED_HOURS"] = 1
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    old = prepare(body="old")
    young = prepare(body="young")
    now = due_at(old) + 1000
    Transaction.objects.filter(pk=old.pk).update(born_timestamp=old.born_timestamp - 3_600_001)

    round_at(old.half_queue_id, now)

    old, young = _tx(old), _tx(young)
    assert (old.state, old.resolved_by, old.discard_reason) == (
        "DISCARDED",
        "discard",
        "file_reserved_time",
    )
    assert old.check_times == 0
    assert check_server.received_ids() == [young.transaction_id]
    assert young.state == "PREPARED"
    [copy] = Message.objects.filter(topic=CHECK_MAX_TIME_TOPIC, msg_id=old.transaction_id)
    assert copy.properties[PROPERTY_DISCARD_REASON] == "file_reserved_time"
    assert _delivered(old) == []


# --- Undelivered checks -----------------------------------------------------------------------


def test_undelivered_checks_back_off_uncounted_and_mark_the_group_unreachable(
    topic, db, check_server, broker_settings
):
    broker_settings["HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS"] = 1000
    broker_settings["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] = 8000
    broker_settings["HALFMOON_TRANSACTION_CHECK_MAX"] = 2
    group = producer_group_create(name="G", check_url=closed_port_url())
    check_server.secrets["G"] = group.check_secret
    tx = prepare()
    now = due_at(tx)
    first_failure = now

    backoffs = []
    for _ in range(6):
        result = round_for(tx, now)
        [outcome] = result["outcomes"]
        assert outcome.delivered is False
        tx = _tx(tx)
        assert tx.state == "PREPARED"  # never discarded for checks it could not send
        assert tx.check_times == 0
        backoffs.append(tx.next_check_timestamp - now)
        # Not due again before the backoff ends.
        assert round_for(tx, tx.next_check_timestamp - 1)["due"] == 0
        now = tx.next_check_timestamp
    assert backoffs == [1000, 2000, 4000, 8000, 8000, 8000]
    assert tx.undelivered_checks == 6

    group.refresh_from_db()
    assert group.unreachable_since == first_failure
    assert group.last_check_error
    assert (
        TransactionEvent.objects.filter(transaction_id=tx.pk, kind="check_undelivered").count() == 6
    )
    assert TransactionEvent.objects.filter(transaction_id=tx.pk, kind="check_sent").count() == 0

    # The producer comes back (the URL changes without resetting the group's state by hand).
    ProducerGroup.objects.filter(name="G").update(check_url=check_server.url)
    round_for(tx, now)
    [request] = check_server.received()
    assert request.body["check_times"] == 1
    assert request.signature_valid is True
    tx = _tx(tx)
    assert (tx.check_times, tx.undelivered_checks) == (1, 0)
    assert tx.next_check_timestamp == now + 8000
    group.refresh_from_db()
    assert (group.unreachable_since, group.last_check_error) == (None, "")


def test_group_shown_unreachable_through_the_api(topic, db, owner, broker_settings):
    producer_group_create(name="G", check_url=closed_port_url())
    tx = prepare()
    round_for(tx, due_at(tx))
    data = owner.get("/api/v1/producer-groups/G").json()
    assert data["unreachable_since"] == due_at(tx)
    assert data["last_check_error"]


# --- Poll groups (check_url null) -------------------------------------------------------------


def test_poll_group_check_request_handed_out_once_and_counted(
    topic, producer_group, producer, broker_settings
):
    tx = prepare()
    result = round_for(tx, due_at(tx))
    assert result["due"] == 1 and result["jobs"] == []
    assert (
        CheckRequest.objects.filter(transaction=tx, delivered_timestamp__isnull=True).count() == 1
    )
    assert _tx(tx).check_times == 0  # queued is not delivered

    response = producer.get("/api/v1/producer-groups/G/check-requests")
    assert response.status_code == 200, response.content
    [request] = response.json()["check_requests"]
    assert set(request) == CONTRACT_FIELDS | {"body"}
    assert request["transaction_id"] == tx.transaction_id
    assert request["check_times"] == 1
    assert _tx(tx).check_times == 1

    assert producer.get("/api/v1/producer-groups/G/check-requests").json() == {"check_requests": []}

    response = producer.post(
        f"/api/v1/transactions/{tx.transaction_id}/end",
        {"producer_group": "G", "action": "rollback", "from_transaction_check": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    tx = _tx(tx)
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
    assert _tx(tx).check_times == 0
    assert CheckRequest.objects.filter(transaction=tx).count() == 1

    # A poller comes: the request is handed out, counted, and the group is reachable again.
    [request] = checks.check_requests_poll(producer_group="G")
    assert request["check_times"] == 1
    assert _tx(tx).check_times == 1
    producer_group.refresh_from_db()
    assert (producer_group.unreachable_since, producer_group.last_check_error) == (None, "")


def test_poll_group_request_of_a_resolved_transaction_is_not_handed_out(topic, producer_group):
    tx = prepare()
    round_for(tx, due_at(tx))
    transaction_end(transaction_id=tx.transaction_id, producer_group="G", action="commit")

    assert checks.check_requests_poll(producer_group="G") == []
    assert not CheckRequest.objects.filter(transaction=tx).exists()
    tx = _tx(tx)
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
    tx = _tx(tx)
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

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive()  # waiting, nothing queued yet
    round_for(tx, due_at(tx))
    thread.join(25)
    assert not thread.is_alive()
    assert result["status"] == 200
    [request] = result["body"]["check_requests"]
    assert request["transaction_id"] == tx.transaction_id
    assert result["elapsed"] < 15  # well before wait_ms ran out
    assert _tx(tx).check_times == 1


# --- Concurrency and the task layer -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_rounds_never_send_the_same_check_twice(topic, broker_settings):
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_CHECK_BATCH_SIZE"] = 7

    def slow_unknow(check):
        time.sleep(0.05)
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=slow_unknow) as server:
        group = producer_group_create(name="G", check_url=server.url)
        server.secrets["G"] = group.check_secret
        txs = [prepare(body=f"m{i}") for i in range(40)]
        assert {tx.half_queue_id for tx in txs} == {0}
        start = threading.Barrier(4)
        errors: list[BaseException] = []

        def worker():
            try:
                start.wait()
                for _ in range(4):
                    checks.check_round(half_queue_id=0)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        checks.check_round(half_queue_id=0)  # whatever the threads left (all skipped as locked)

        ids = server.received_ids()
        assert sorted(ids) == sorted(tx.transaction_id for tx in txs)  # each exactly once
        assert all(r.signature_valid for r in server.received())
    assert set(Transaction.objects.values_list("check_times", flat=True)) == {1}


def test_check_task_honours_the_lease(topic, http_group, check_server, broker_settings):
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    tx = prepare()
    name = f"check:{tx.half_queue_id}"
    ScanLease.objects.create(name=name, owner="other-host:1", expires_timestamp=now_ms() + 60_000)

    assert check_half_queue(tx.half_queue_id) is None
    assert check_server.received() == []
    assert _tx(tx).check_times == 0
    assert ScanLease.objects.get(name=name).owner == "other-host:1"

    # The other worker died: its lease expires and is taken over.
    ScanLease.objects.filter(name=name).update(expires_timestamp=now_ms() - 1)
    totals = check_half_queue(tx.half_queue_id)
    assert totals is not None
    assert (totals["due"], totals["sent"], totals["delivered"]) == (1, 1, 1)
    assert check_server.received_ids() == [tx.transaction_id]
    lease = ScanLease.objects.get(name=name)
    assert (lease.owner, lease.expires_timestamp) == ("", 0)  # released after the run


@pytest.mark.django_db(transaction=True)
def test_two_check_tasks_of_one_process_on_one_queue_never_run_together(topic, broker_settings):
    """Celery runs tasks in forked children (same parent) or in threads of one process: a
    second scan of a queue must not start while the first holds its lease."""
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    first_arrived = threading.Event()
    release = threading.Event()

    def held(check):
        first_arrived.set()
        release.wait(10)
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=held) as server:
        producer_group_create(name="G", check_url=server.url)
        prepare()
        results: list = []

        def run():
            try:
                results.append(check_half_queue(0))
            finally:
                connection.close()

        first = threading.Thread(target=run)
        first.start()
        assert first_arrived.wait(10)
        prepare()  # due now, so a second scan would have work to do
        second = threading.Thread(target=run)
        second.start()
        second.join(10)
        release.set()
        first.join(10)
        assert not second.is_alive() and not first.is_alive()
    assert results[0] is None, results  # the second scan found the lease taken
    assert results[1] is not None and results[1]["sent"] == 1


@pytest.mark.django_db(transaction=True)
def test_check_task_stops_when_its_lease_was_taken_over(topic, broker_settings):
    """A round outlived the lease and another worker took the queue: the first one stops at
    the end of its round instead of scanning on beside the new holder."""
    broker_settings["HALFMOON_TRANSACTION_TIMEOUT_MS"] = 0
    broker_settings["HALFMOON_HALF_QUEUE_NUMS"] = 1
    broker_settings["HALFMOON_CHECK_BATCH_SIZE"] = 1

    def steal_the_lease(check):
        try:
            ScanLease.objects.filter(name="check:0").update(
                owner="new-holder:1", expires_timestamp=now_ms() + 60_000
            )
        finally:
            connection.close()
        return 200, {"state": "UNKNOW"}

    with CheckServer(answer=steal_the_lease) as server:
        producer_group_create(name="G", check_url=server.url)
        for i in range(3):
            prepare(body=f"m{i}")
        totals = check_half_queue(0)
        assert totals is not None and totals["sent"] == 1
        assert len(server.received()) == 1
    assert (
        ScanLease.objects.get(name="check:0").owner == "new-holder:1"
    )  # not released by the loser
    assert sorted(Transaction.objects.values_list("check_times", flat=True)) == [0, 0, 1]
