"""Step 2 of a round, ``checks_send`` (broker/services/checks/transport.py): what a check carries
(api-v1 body and signature) and how the producer's answer is read, strictly, into the check
journal's label."""

from __future__ import annotations

import base64
import threading

import httpx
import pytest

from broker.constants import (
    HALF_TOPIC,
)
from broker.models import Message, Resolution
from broker.rules.clock import now_ms
from broker.services.checks import check_answer_parse
from broker.services.transactions.half import transaction_prepare
from tests.services.checks.helpers import (
    CONTRACT_FIELDS,
    INTERVAL,
    delivered_copies,
    journal,
    refreshed,
    url_group,
)
from tests.support import (
    due_at,
    expected_signature,
    prepare,
    round_at,
    round_for,
)


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

    tx = refreshed(tx)
    assert (tx.state, tx.check_times, tx.resolved_by) == ("PREPARED", 1, None)
    assert delivered_copies(tx) == []
    assert not Resolution.objects.filter(transaction=tx).exists()

    # Asked again one interval later, with the count of this second check.
    round_for(tx, due + INTERVAL)
    assert [r.body["check_times"] for r in check_server.received()] == [1, 2]
    assert refreshed(tx).check_times == 2


def test_read_timeout_after_sending_counts_as_unknow(
    topic, http_group, check_server, broker_settings
):
    broker_settings["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    release, answered = threading.Event(), threading.Event()

    def late(check):
        release.wait(10)  # answers only once the broker has given up waiting
        answered.set()
        return 200, {"state": "COMMIT_MESSAGE"}

    check_server.answer = late
    tx = prepare()
    try:
        result = round_for(tx, due_at(tx))
    finally:
        release.set()

    [outcome] = result["outcomes"]
    assert outcome.delivered is True
    assert outcome.action == "unknown"
    tx = refreshed(tx)
    assert (tx.state, tx.check_times) == ("PREPARED", 1)
    assert len(check_server.received()) == 1
    # The late COMMIT answer is not applied: the broker stopped listening.
    assert answered.wait(5)
    assert refreshed(tx).state == "PREPARED"
    assert delivered_copies(tx) == []


@pytest.mark.parametrize(
    ("answer", "label", "state"),
    [
        pytest.param(
            (200, {"state": "COMMIT_MESSAGE"}), "COMMIT_MESSAGE", "COMMITTED", id="commit"
        ),
        pytest.param(
            (200, {"state": "ROLLBACK_MESSAGE"}), "ROLLBACK_MESSAGE", "ROLLED_BACK", id="rollback"
        ),
        pytest.param((200, {"state": "UNKNOW"}), "UNKNOW", "PREPARED", id="UNKNOW"),
        pytest.param((200, {"state": "UNKNOWN"}), "UNKNOW", "PREPARED", id="UNKNOWN"),
        pytest.param((200, b"garbage, not json"), "INVALID", "PREPARED", id="garbage"),
        pytest.param((200, "COMMIT_MESSAGE"), "INVALID", "PREPARED", id="bare-word"),
        pytest.param((200, {"state": "commit_message"}), "INVALID", "PREPARED", id="lower-case"),
        pytest.param(
            (200, {"state": "COMMIT_MESSAGE "}), "INVALID", "PREPARED", id="trailing-space"
        ),
        pytest.param((200, {"state": ["COMMIT_MESSAGE"]}), "INVALID", "PREPARED", id="state-list"),
        pytest.param((200, {"status": "COMMIT_MESSAGE"}), "INVALID", "PREPARED", id="no-state"),
        pytest.param((201, {"state": "COMMIT_MESSAGE"}), "INVALID", "PREPARED", id="http-201"),
        pytest.param((204, b""), "INVALID", "PREPARED", id="http-204"),
        pytest.param((500, {"state": "ROLLBACK_MESSAGE"}), "INVALID", "PREPARED", id="http-500"),
        pytest.param((202, b""), "ACCEPTED", "PREPARED", id="accepted-202"),
        pytest.param((202, {"state": "COMMIT_MESSAGE"}), "ACCEPTED", "PREPARED", id="202-body"),
    ],
)
def test_the_answer_is_recorded_strictly_in_the_check_journal(
    one_queue, check_server, answer, label, state
):
    check_server.answer = lambda check: answer
    url_group("G", check_server.url, check_server)
    tx = prepare()
    round_at(0, now_ms())

    [event] = journal("check_sent")
    assert (event.transaction_id, event.outcome, event.check_times) == (tx.pk, label, 1)
    assert event.actor == "http"
    tx.refresh_from_db()
    assert (tx.state, tx.check_times) == (state, 1)
    assert not journal("check_undelivered").exists()


def test_a_timeout_after_sending_is_journalled_as_timeout_and_counted(one_queue, silent_url):
    one_queue["HALFMOON_CHECK_REQUEST_TIMEOUT_MS"] = 300
    url_group("G", silent_url)
    tx = prepare()
    round_at(0, now_ms())

    [event] = journal("check_sent")
    assert (event.outcome, event.check_times) == ("TIMEOUT", 1)
    assert "Timeout" in event.detail["error"]
    tx.refresh_from_db()
    assert (tx.state, tx.check_times) == ("PREPARED", 1)


@pytest.mark.parametrize(
    ("status", "content", "parsed"),
    [
        (200, b'{"state": "COMMIT_MESSAGE"}', ("commit", "COMMIT_MESSAGE")),
        (200, b'{"state": "ROLLBACK_MESSAGE"}', ("rollback", "ROLLBACK_MESSAGE")),
        (200, b'{"state": "UNKNOW"}', ("unknown", "UNKNOW")),
        (200, b'{"state": "UNKNOWN"}', ("unknown", "UNKNOW")),
        (200, b'{"state": "Commit_Message"}', ("unknown", "INVALID")),
        (200, b'["COMMIT_MESSAGE"]', ("unknown", "INVALID")),
        (200, b"not json", ("unknown", "INVALID")),
        (202, b'{"state": "ROLLBACK_MESSAGE"}', (None, "ACCEPTED")),
        (500, b'{"state": "COMMIT_MESSAGE"}', ("unknown", "INVALID")),
    ],
)
def test_check_answer_parse_reads_only_the_states_of_api_v1(status, content, parsed):
    response = httpx.Response(status, content=content)
    assert check_answer_parse(response) == parsed
