"""api-v1 "Batches": ``POST /transactions/batch``, ``/transactions/end-batch`` and
``/messages/batch``: one result per item (the single endpoint's status and body, or its error
for that item alone), the limits of a whole batch (400, 413, nothing stored), idempotency per
msg_id, rights per item, and a batch end racing a single end."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from broker.constants import HALF_TOPIC
from broker.models import Message, Resolution, Transaction
from broker.services.topology.writes import access_key_create, producer_group_create, topic_create
from tests.api_helpers import ERROR_KEYS, assert_error, end, key_client, post, send_half
from tests.conftest import client_for
from tests.support import prepare

TX_BATCH = "/api/v1/transactions/batch"
END_BATCH = "/api/v1/transactions/end-batch"
MSG_BATCH = "/api/v1/messages/batch"


def half(body: str = "order paid", **fields: Any) -> dict[str, Any]:
    """One half message item of group G on TranTest."""
    return {"producer_group": "G", "topic": "TranTest", "body": body, **fields}


def results(response: Any, count: int) -> list[dict[str, Any]]:
    """The batch answer's results: 200 ``{"results": [...]}`` with ``count`` items, each
    ``{"status", "body"}`` or ``{"status", "error"}`` (the contract's error object)."""
    assert response.status_code == 200, (response.status_code, response.content[:500])
    answer = response.json()
    assert set(answer) == {"results"}
    items = answer["results"]
    assert len(items) == count
    for item in items:
        assert set(item) in ({"status", "body"}, {"status", "error"}), item
        if "error" in item:
            assert 400 <= item["status"] < 500
            assert set(item["error"]) == ERROR_KEYS
    return items


def half_messages() -> int:
    return Message.objects.filter(topic=HALF_TOPIC).count()


# --- transactions/batch --------------------------------------------------------------------------


def test_a_batch_of_half_messages_is_stored_and_answered_in_order(producer, topic, producer_group):
    items = results(post(producer, TX_BATCH, {"messages": [half("a"), half("b"), half("c")]}), 3)

    assert [i["status"] for i in items] == [201, 201, 201]
    single = send_half(producer).json()
    for item in items:
        assert set(item["body"]) == set(single)
        assert item["body"]["status"] == "SEND_OK"
        assert item["body"]["state"] == "PREPARED"
    ids = [i["body"]["transaction_id"] for i in items]
    assert len(set(ids)) == 3
    stored = {
        tx.pk: bytes(Message.objects.get(pk=tx.half_commit_log_offset).body)
        for tx in Transaction.objects.filter(pk__in=ids)
    }
    assert stored == {ids[0]: b"a", ids[1]: b"b", ids[2]: b"c"}


def test_one_invalid_item_gets_its_error_and_the_others_are_stored(producer, topic, producer_group):
    messages = [half("a"), {"producer_group": "G", "topic": "TranTest"}, "not an object", half("d")]

    items = results(post(producer, TX_BATCH, {"messages": messages}), 4)

    assert [i["status"] for i in items] == [201, 400, 400, 201]
    single = post(producer, "/api/v1/transactions", messages[1])
    assert_error(single, 400, "invalid_input")
    assert items[1] == {"status": 400, **single.json()}
    assert "non_field_errors" in items[2]["error"]["details"]["fields"]
    assert half_messages() == 2


def test_null_and_list_items_are_400_items(producer, topic, producer_group):
    items = results(post(producer, TX_BATCH, {"messages": [None, [half("a")], half("b")]}), 3)

    assert [i["status"] for i in items] == [400, 400, 201]
    for item in items[:2]:
        assert item["error"]["code"] == "invalid_input"
        assert "non_field_errors" in item["error"]["details"]["fields"]
    assert half_messages() == 1


def test_an_item_error_is_the_single_sends_error(producer, topic, producer_group):
    bad = half(topic="Nowhere")
    single = send_half(producer, topic="Nowhere")

    items = results(post(producer, TX_BATCH, {"messages": [bad]}), 1)

    assert_error(single, 404, "topic_not_found")
    assert items[0] == {"status": 404, **single.json()}


def test_unknown_topic_and_group_and_system_topic_items(producer, topic, producer_group):
    messages = [
        half(topic="Nowhere"),
        half(producer_group="Ghost"),
        half(topic=HALF_TOPIC),
        half("ok"),
    ]
    admin = key_client("admin", is_admin=True)

    items = results(post(admin, TX_BATCH, {"messages": messages}), 4)

    assert [(i["status"], i.get("error", {}).get("code")) for i in items] == [
        (404, "topic_not_found"),
        (404, "producer_group_not_found"),
        (403, "system_topic"),
        (201, None),
    ]
    assert Transaction.objects.count() == 1


def test_an_item_for_a_group_the_key_may_not_use_is_a_403_item(producer, topic, producer_group):
    producer_group_create(name="Other", check_url=None)

    items = results(
        post(producer, TX_BATCH, {"messages": [half(producer_group="Other"), half()]}), 2
    )

    assert items[0]["status"] == 403
    assert items[0]["error"]["code"] == "permission_denied"
    assert items[0]["error"]["details"] == {"producer_group": "Other"}
    assert items[1]["status"] == 201
    assert list(Transaction.objects.values_list("producer_group", flat=True)) == ["G"]


def test_the_same_batch_twice_stores_nothing_twice(producer, topic, producer_group):
    batch = {"messages": [half("a", msg_id="ORDER-1"), half("b", msg_id="ORDER-2")]}

    first = results(post(producer, TX_BATCH, batch), 2)
    second = results(post(producer, TX_BATCH, batch), 2)

    assert [i["status"] for i in first] == [201, 201]
    assert [i["status"] for i in second] == [200, 200]
    assert [i["body"] for i in second] == [i["body"] for i in first]
    assert half_messages() == 2
    assert Transaction.objects.count() == 2


def test_a_msg_id_twice_in_one_batch_is_stored_once(producer, topic, producer_group):
    items = results(
        post(
            producer, TX_BATCH, {"messages": [half("a", msg_id="DUP-1"), half("a", msg_id="DUP-1")]}
        ),
        2,
    )

    assert [i["status"] for i in items] == [201, 200]
    assert half_messages() == 1


def test_a_msg_id_of_another_group_is_a_409_item(owner, producer, topic, producer_group):
    producer_group_create(name="Other", check_url=None)
    send_half(owner, producer_group="Other", msg_id="TAKEN-1")

    items = results(post(producer, TX_BATCH, {"messages": [half(msg_id="TAKEN-1"), half()]}), 2)

    assert items[0]["status"] == 409
    assert items[0]["error"]["code"] == "duplicate_msg_id"
    assert items[1]["status"] == 201


def test_a_batch_over_the_limit_is_refused_whole(producer, topic, producer_group, broker_settings):
    broker_settings["HALFMOON_BATCH_MAX_MESSAGES"] = 3

    error = assert_error(
        post(producer, TX_BATCH, {"messages": [half()] * 4}), 400, "batch_too_large"
    )

    assert error["details"] == {"count": 4, "max_messages": 3}
    assert half_messages() == 0
    assert [
        i["status"] for i in results(post(producer, TX_BATCH, {"messages": [half()] * 3}), 3)
    ] == [201] * 3


@pytest.mark.parametrize(
    "url,field", [(TX_BATCH, "messages"), (END_BATCH, "ends"), (MSG_BATCH, "messages")]
)
def test_an_empty_batch_is_refused(producer, url, field):
    assert_error(post(producer, url, {field: []}), 400, "batch_empty")


@pytest.mark.parametrize("data", [{}, {"messages": "x"}, {"messages": {"a": 1}}, []])
def test_a_malformed_envelope_is_refused(producer, data):
    assert_error(post(producer, TX_BATCH, data), 400)


def test_a_batch_over_the_body_limit_is_413_and_nothing_stored(
    producer, topic, producer_group, settings
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096

    response = post(producer, TX_BATCH, {"messages": [half("x" * 1000) for _ in range(5)]})

    assert_error(response, 413, "request_too_large")
    assert half_messages() == 0


def test_an_item_over_the_message_size_is_a_413_item(
    producer, topic, producer_group, broker_settings
):
    broker_settings["HALFMOON_MAX_MESSAGE_SIZE"] = 10

    items = results(post(producer, TX_BATCH, {"messages": [half("x" * 11), half("small")]}), 2)

    assert items[0]["status"] == 413
    assert items[1]["status"] == 201


def test_a_batch_needs_a_key(anonymous):
    assert_error(post(anonymous, TX_BATCH, {"messages": [half()]}), 401)


# --- transactions/end-batch ----------------------------------------------------------------------


def test_end_batch_commits_rolls_back_and_leaves_unknown(producer, topic, producer_group):
    a, b, c = prepare(), prepare(), prepare()
    ends = [
        {"transaction_id": a.pk, "producer_group": "G", "action": "commit"},
        {"transaction_id": b.pk, "producer_group": "G", "action": "rollback", "remark": "no stock"},
        {"transaction_id": c.pk, "producer_group": "G", "action": "unknown"},
    ]

    items = results(post(producer, END_BATCH, {"ends": ends}), 3)

    assert [i["status"] for i in items] == [200, 200, 200]
    assert items[0]["body"]["state"] == "COMMITTED"
    assert set(items[0]["body"]) == {
        "transaction_id",
        "state",
        "msg_id",
        "topic",
        "queue_id",
        "queue_offset",
    }
    assert items[1]["body"] == {"transaction_id": b.pk, "state": "ROLLED_BACK"}
    assert items[2]["body"] == {"transaction_id": c.pk, "state": "PREPARED"}
    assert Message.objects.filter(topic="TranTest").count() == 1
    assert Resolution.objects.get(transaction_id=b.pk).reason == "no stock"
    # The same ends again: the same answers, nothing delivered twice.
    again = results(post(producer, END_BATCH, {"ends": ends}), 3)
    assert [i["body"] for i in again] == [i["body"] for i in items]
    assert Message.objects.filter(topic="TranTest").count() == 1


def test_end_batch_items_answer_each_single_error(producer, topic, producer_group):
    producer_group_create(name="Other", check_url=None)
    committed, theirs, ok = prepare(), prepare(producer_group="Other"), prepare()
    end(producer, committed.pk, "commit")
    ends = [
        {"transaction_id": "NO-SUCH-TX", "producer_group": "G", "action": "commit"},
        {"transaction_id": committed.pk, "producer_group": "G", "action": "rollback"},
        {"transaction_id": theirs.pk, "producer_group": "Other", "action": "commit"},
        {"transaction_id": theirs.pk, "producer_group": "G", "action": "commit"},
        {"transaction_id": ok.pk, "producer_group": "G", "action": "maybe"},
        {"transaction_id": "bad id!", "producer_group": "G", "action": "commit"},
        {"transaction_id": ok.pk, "producer_group": "G", "action": "commit"},
    ]
    single_409 = end(producer, committed.pk, "rollback")

    items = results(post(producer, END_BATCH, {"ends": ends}), 7)

    assert [(i["status"], i.get("error", {}).get("code")) for i in items] == [
        (404, "transaction_not_found"),
        (409, "transaction_already_resolved"),
        (403, "permission_denied"),
        (403, "producer_group_mismatch"),
        (400, "invalid_input"),
        (400, "invalid_input"),
        (200, None),
    ]
    assert items[1]["error"]["details"]["state"] == "COMMITTED"
    assert set(items[1]["error"]["details"]) == set(single_409.json()["error"]["details"])
    assert Transaction.objects.get(pk=theirs.pk).state == "PREPARED"
    assert Transaction.objects.get(pk=ok.pk).state == "COMMITTED"


def test_end_batch_commit_then_rollback_of_one_transaction(producer, topic, producer_group):
    tx = prepare()
    ends = [
        {"transaction_id": tx.pk, "producer_group": "G", "action": "commit"},
        {"transaction_id": tx.pk, "producer_group": "G", "action": "rollback"},
    ]

    items = results(post(producer, END_BATCH, {"ends": ends}), 2)

    assert [i["status"] for i in items] == [200, 409]
    assert Resolution.objects.filter(transaction_id=tx.pk).count() == 1


# --- messages/batch ------------------------------------------------------------------------------


def test_a_batch_of_normal_messages(producer, topic, producer_group):
    messages = [
        {"topic": "TranTest", "body": "one", "keys": "k1"},
        {"topic": "Nowhere", "body": "lost"},
        {"topic": "TranTest", "body_base64": "AAE="},
        {"topic": "TranTest"},
    ]

    items = results(post(producer, MSG_BATCH, {"messages": messages}), 4)

    assert [i["status"] for i in items] == [201, 404, 201, 400]
    assert set(items[0]["body"]) == {
        "status",
        "msg_id",
        "topic",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
    }
    stored = Message.objects.filter(topic="TranTest").order_by("commit_log_offset")
    assert [bytes(m.body) for m in stored] == [b"one", b"\x00\x01"]
    assert {m.producer_group for m in stored} == {"G"}


def test_a_message_batch_needs_a_producer_key(consumer, producer, topic, producer_group):
    producer_group_create(name="Other", check_url=None)
    assert_error(post(consumer, MSG_BATCH, {"messages": [{"topic": "TranTest", "body": "x"}]}), 403)

    items = results(
        post(
            producer,
            MSG_BATCH,
            {"messages": [{"topic": "TranTest", "body": "x", "producer_group": "Other"}]},
        ),
        1,
    )
    assert items[0]["status"] == 403
    assert Message.objects.filter(topic="TranTest").count() == 0


# --- OpenAPI --------------------------------------------------------------------------------------


def test_the_batches_are_documented(anonymous):
    document = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in (TX_BATCH, END_BATCH, MSG_BATCH):
        operation = document["paths"][path]["post"]
        assert {"200", "400", "413"} <= set(operation["responses"]), path
    schemas = document["components"]["schemas"]
    request = schemas["TransactionBatchInRequest"]["properties"]["messages"]
    assert request["maxItems"] == 128 and request["minItems"] == 1
    assert request["items"]["anyOf"][0] == {
        "$ref": "#/components/schemas/TransactionPrepareInRequest"
    }
    item = schemas["TransactionBatchOut"]["properties"]["results"]["items"]["oneOf"]
    assert item[0]["properties"]["status"]["enum"] == [201, 200]
    assert item[0]["properties"]["body"] == {"$ref": "#/components/schemas/TransactionPrepareOut"}
    assert item[1]["properties"]["error"] == {"$ref": "#/components/schemas/ErrorDetailOut"}


# --- A batch end racing a single end ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(5))
def test_an_end_batch_and_a_single_end_resolve_once(round_):
    topic_create(name="TranTest", queue_nums=2)
    producer_group_create(name="G", check_url=None)
    _, token = access_key_create(name="racer", producer_groups=["G"])
    others = [prepare() for _ in range(3)]
    tx = prepare()
    ends = [
        {"transaction_id": t.pk, "producer_group": "G", "action": "commit"} for t in [*others, tx]
    ]
    start = threading.Barrier(2)
    answers: dict[str, Any] = {}

    def run(name: str, call: Any) -> None:
        try:
            start.wait()
            answers[name] = call(client_for(token))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            answers[name] = exc
        finally:
            connection.close()

    jobs = {
        "batch": lambda c: post(c, END_BATCH, {"ends": ends}),
        "single": lambda c: end(c, tx.pk, "rollback"),
    }
    threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    tx.refresh_from_db()
    assert tx.state in ("COMMITTED", "ROLLED_BACK")
    assert Resolution.objects.filter(transaction_id=tx.pk).count() == 1
    delivered = Message.objects.filter(topic="TranTest", msg_id=tx.pk).count()
    assert delivered == (1 if tx.state == "COMMITTED" else 0)
    batch_item = results(answers["batch"], 4)[3]
    single = answers["single"]
    if tx.state == "COMMITTED":
        assert batch_item["status"] == 200
        assert_error(single, 409, "transaction_already_resolved")
    else:
        assert single.status_code == 200
        assert batch_item["status"] == 409
    assert all(i["status"] == 200 for i in results(answers["batch"], 4)[:3])
    assert Transaction.objects.filter(state="COMMITTED").count() == 3 + (tx.state == "COMMITTED")


# --- Batches racing batches ----------------------------------------------------------------------


def _race(token: str, jobs: dict[str, Any]) -> dict[str, Any]:
    """Run each job (a call taking a client) at once in its own thread; their answers."""
    start = threading.Barrier(len(jobs))
    answers: dict[str, Any] = {}

    def run(name: str, call: Any) -> None:
        try:
            start.wait()
            answers[name] = call(client_for(token))
        except BaseException as exc:  # noqa: BLE001 - asserted by the caller
            answers[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(3))
def test_two_batches_of_the_same_msg_ids_store_each_once(round_):
    """The second batch's set-based insert meets the first's msg_ids (a unique violation):
    it answers them item by item, as stored already."""
    topic_create(name="TranTest", queue_nums=2)
    producer_group_create(name="G", check_url=None)
    _, token = access_key_create(name="racer", producer_groups=["G"])
    items = [half(msg_id=f"RACE-{round_}-{n}") for n in range(16)]

    answers = _race(
        token, {name: lambda c: post(c, TX_BATCH, {"messages": items}) for name in "ab"}
    )

    statuses = [[r["status"] for r in results(answers[name], 16)] for name in "ab"]
    for n in range(16):  # one batch stored it (201), the other found it stored (200)
        assert sorted(s[n] for s in statuses) == [200, 201]
    assert Transaction.objects.count() == 16
    assert half_messages() == 16
    for queue in set(Transaction.objects.values_list("half_queue_id", flat=True)):
        offsets = Transaction.objects.filter(half_queue_id=queue).values_list(
            "half_queue_offset", flat=True
        )
        assert sorted(offsets) == list(range(len(offsets)))  # gap-free


@pytest.mark.django_db(transaction=True)
def test_end_batches_over_the_same_transactions_in_opposite_orders_do_not_deadlock():
    """Rows are locked in id order and counters in (topic, queue) order whatever the items'
    order: two end batches of the same transactions, listed in opposite orders, both answer,
    each transaction resolved once."""
    topic_create(name="TranTest", queue_nums=4)
    producer_group_create(name="G", check_url=None)
    _, token = access_key_create(name="racer", producer_groups=["G"])
    txs = [prepare() for _ in range(24)]
    forward = [{"transaction_id": t.pk, "producer_group": "G", "action": "commit"} for t in txs]
    backward = list(reversed(forward))

    answers = _race(
        token,
        {
            "forward": lambda c: post(c, END_BATCH, {"ends": forward}),
            "backward": lambda c: post(c, END_BATCH, {"ends": backward}),
        },
    )

    for name in ("forward", "backward"):
        assert {r["status"] for r in results(answers[name], 24)} == {200}
    assert Resolution.objects.count() == 24
    assert Message.objects.filter(topic="TranTest").count() == 24
