"""broker.models.model_new: the unsaved instance ``model(**values)`` makes, for the models the
send path builds (a half message and its transaction)."""

from __future__ import annotations

import pytest
from django.db.models import Model

from broker.models import Message, Transaction, model_new


def fields_of(instance: Model) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (
            Transaction,
            {
                "transaction_id": "TX-1",
                "producer_group": "G",
                "topic": "TranTest",
                "queue_id": 2,
                "tags": "a",
                "half_queue_id": 1,
                "check_immunity_ms": 6000,
                "born_timestamp": 1,
                "next_check_timestamp": 6001,
            },
        ),
        (Transaction, {}),
        (
            Message,
            {
                "topic": "TranTest",
                "queue_id": 1,
                "msg_id": "M-1",
                "body": b"\x00x",
                "properties": {"a": "1"},
                "born_timestamp": 5,
                "store_timestamp": 6,
            },
        ),
    ],
)
def test_model_new_is_the_keyword_constructor(model, values):
    built = model_new(model, **values)
    expected = model(**values)

    assert fields_of(built) == fields_of(expected)
    assert built._state.adding and built._state.db is None
    assert built.pk is None or built.pk == expected.pk


def test_each_instance_gets_its_own_default_dict():
    first, second = model_new(Message, topic="T"), model_new(Message, topic="T")

    assert first.properties == {} and first.properties is not second.properties


def test_an_unknown_field_is_refused():
    with pytest.raises(TypeError, match="nope"):
        model_new(Transaction, nope=1)
