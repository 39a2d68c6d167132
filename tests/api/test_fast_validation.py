"""``broker.api.fast_validation``: the compiled validation of the busy endpoints' serializers
answers exactly what DRF answers for a valid object and nothing for an invalid one, so every
error is still DRF's; a batch's bad items in the middle get the single send's errors; a send's
answer is DRF's representation."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from broker.api.fast_validation import validation_plan
from broker.api.serializers.batch import TransactionEndBatchItemInSerializer
from broker.api.serializers.messages import AckInSerializer, MessageSendInSerializer
from broker.api.serializers.transactions import (
    TransactionEndInSerializer,
    TransactionPrepareInSerializer,
    TransactionPrepareOutSerializer,
)
from broker.api.shapes import represented, validated
from broker.models import Transaction
from broker.rules.states import TransactionState
from tests.api_helpers import post

HALF = {"producer_group": "G", "topic": "TranTest", "body": "order paid"}
END = {"transaction_id": "TX-1", "producer_group": "G", "action": "commit"}

HALF_CASES: list[Any] = [
    HALF,
    {**HALF, "tags": "a b", "keys": "k1 k2", "msg_id": "M:1.x_y-z"},
    {**HALF, "body": ""},
    {**HALF, "body": "  spaced  "},
    {"producer_group": "G", "topic": "TranTest", "body_base64": "aGk="},
    {"producer_group": "G", "topic": "TranTest", "body_base64": ""},
    {**HALF, "properties": {"a": "1", "b": ""}},
    {**HALF, "properties": {}},
    {**HALF, "properties": None},
    {**HALF, "check_immunity_seconds": 30},
    {**HALF, "check_immunity_seconds": 30.0},
    {**HALF, "check_immunity_seconds": None},
    {**HALF, "check_immunity_seconds": -5},
    {**HALF, "unknown": [1, 2]},
    {**HALF, "tags": ""},
    {**HALF, "tags": None},
    {**HALF, "tags": "x" * 255},
    {**HALF, "tags": "x" * 256},
    {**HALF, "keys": 5},
    {**HALF, "body": 5},
    {**HALF, "body": "a\x00b"},
    {**HALF, "body": "\ud800"},
    {**HALF, "body_base64": "aGk="},
    {"producer_group": "G", "topic": "TranTest"},
    {"producer_group": "G", "topic": "TranTest", "body_base64": "not base64!"},
    {**HALF, "producer_group": ""},
    {**HALF, "producer_group": "bad name"},
    {**HALF, "producer_group": "x" * 127},
    {**HALF, "producer_group": "x" * 128},
    {**HALF, "topic": None},
    {**HALF, "topic": True},
    {"topic": "TranTest", "body": "b"},
    {**HALF, "msg_id": ""},
    {**HALF, "msg_id": "bad id!"},
    {**HALF, "msg_id": "x" * 65},
    {**HALF, "msg_id": None},
    {**HALF, "check_immunity_seconds": "30"},
    {**HALF, "check_immunity_seconds": 30.5},
    {**HALF, "check_immunity_seconds": True},
    {**HALF, "check_immunity_seconds": 10**30},
    {**HALF, "properties": {"a": 1}},
    {**HALF, "properties": ["a"]},
    {**HALF, "properties": {"a": None}},
    {**HALF, "properties": {"a": "\x00"}},
    {},
]

END_CASES: list[Any] = [
    END,
    {**END, "action": "rollback"},
    {**END, "action": "unknown"},
    {**END, "from_transaction_check": True},
    {**END, "from_transaction_check": False},
    {**END, "remark": "why"},
    {**END, "remark": ""},
    {**END, "remark": None},
    {**END, "remark": "x" * 1025},
    {**END, "action": "maybe"},
    {**END, "action": ""},
    {**END, "action": None},
    {**END, "action": 1},
    {**END, "from_transaction_check": "true"},
    {**END, "from_transaction_check": 1},
    {**END, "from_transaction_check": None},
    {**END, "transaction_id": "bad id!"},
    {**END, "transaction_id": 7},
    {"producer_group": "G", "action": "commit"},
    {"transaction_id": "TX-1", "action": "commit"},
    {},
]


def drf_answer(serializer_class: type[serializers.Serializer], data: Any) -> Any:
    """What DRF alone answers: the validated data, or the ValidationError's detail."""
    try:
        return ("valid", dict(serializer_class().run_validation(data)))
    except ValidationError as exc:
        return ("invalid", exc.detail)


@pytest.mark.parametrize(
    ("serializer_class", "cases"),
    [
        (TransactionPrepareInSerializer, HALF_CASES),
        (MessageSendInSerializer, HALF_CASES),
        (TransactionEndInSerializer, END_CASES),
        (TransactionEndBatchItemInSerializer, END_CASES),
    ],
)
def test_the_plan_answers_drf_s_data_for_valid_objects_and_nothing_for_invalid_ones(
    serializer_class, cases
):
    plan = validation_plan(serializer_class())
    assert plan is not None
    answered = 0
    for data in cases:
        kind, expected = drf_answer(serializer_class, data)
        got = plan(data)
        if kind == "invalid":
            assert got is None, data
        elif got is not None:
            answered += 1
            assert got == expected, data
            assert list(got) == list(expected), data
            assert [type(v) for v in got.values()] == [type(v) for v in expected.values()], data
    assert answered >= 5


@pytest.mark.parametrize("data", [*HALF_CASES, "not an object", None, [HALF]])
def test_validated_answers_as_drf_with_or_without_the_plan(data):
    kind, expected = drf_answer(TransactionPrepareInSerializer, data)
    if kind == "valid":
        assert validated(TransactionPrepareInSerializer, data) == expected
    else:
        with pytest.raises(ValidationError):
            validated(TransactionPrepareInSerializer, data)


def test_a_serializer_of_other_fields_has_no_plan():
    assert validation_plan(AckInSerializer()) is None  # a ListField


def test_bad_items_in_the_middle_of_a_batch_get_the_single_send_s_errors(
    producer, topic, producer_group
):
    bad = [
        {**HALF, "tags": "x" * 256},
        {**HALF, "body": 5},
        {**HALF, "producer_group": "bad name"},
        {**HALF, "body_base64": "aGk="},
        {"producer_group": "G", "topic": "TranTest", "body_base64": "not base64!"},
        {**HALF, "msg_id": "bad id!"},
        {**HALF, "check_immunity_seconds": "30"},
        {**HALF, "properties": {"a": 1}},
        {**HALF, "body": "a\x00b"},
    ]
    messages = [HALF, *bad, {**HALF, "body": "last"}]

    response = post(producer, "/api/v1/transactions/batch", {"messages": messages})

    assert response.status_code == 200
    items = response.json()["results"]
    assert [i["status"] for i in items] == [201] + [400] * len(bad) + [201]
    for item, data in zip(items[1:-1], bad, strict=True):
        single = post(producer, "/api/v1/transactions", data)
        assert single.status_code == 400
        assert item == {"status": 400, **single.json()}, data


def test_bad_end_items_in_the_middle_of_an_end_batch_get_the_single_end_s_errors(
    producer, topic, producer_group
):
    bad = [
        {**END, "action": "maybe"},
        {**END, "from_transaction_check": "true"},
        {**END, "remark": "x" * 1025},
        {"transaction_id": "TX-1", "action": "commit"},
    ]
    ends = [END, *bad, END]

    response = post(producer, "/api/v1/transactions/end-batch", {"ends": ends})

    assert response.status_code == 200
    items = response.json()["results"]
    assert [i["status"] for i in items] == [404, 400, 400, 400, 400, 404]
    for item, data in zip(items[1:-1], bad, strict=True):
        body = {k: v for k, v in data.items() if k != "transaction_id"}
        single = post(producer, "/api/v1/transactions/TX-1/end", body)
        assert single.status_code == 400
        assert item == {"status": 400, **single.json()}, data


def test_a_send_s_answer_is_drf_s_representation():
    tx = Transaction(
        transaction_id="TX-1",
        producer_group="G",
        topic="TranTest",
        state=TransactionState.PREPARED,
        half_commit_log_offset=17,
        half_queue_offset=3,
    )
    drf = serializers.Serializer.to_representation(TransactionPrepareOutSerializer(), tx)

    assert represented(TransactionPrepareOutSerializer, tx) == drf
    assert list(represented(TransactionPrepareOutSerializer, tx)) == list(drf)
    tx.half_commit_log_offset = tx.half_queue_offset = None
    assert represented(
        TransactionPrepareOutSerializer, tx
    ) == serializers.Serializer.to_representation(TransactionPrepareOutSerializer(), tx)
