"""The operators' scope (``broker.rules.grants``): a full operator operates every group, a
scoped one exactly its granted groups, a viewer none."""

from __future__ import annotations

import pytest

from broker.rules.grants import (
    CONSUMER_GROUP,
    FULL_SCOPE,
    GRANT_KINDS,
    NO_SCOPE,
    PRODUCER_GROUP,
    GroupRef,
    OperatorScope,
    operator_scope_of,
    scope_description,
)

PAYMENTS_OPERATOR = operator_scope_of(
    full=False,
    grants=[(PRODUCER_GROUP, "payments"), (CONSUMER_GROUP, "billing")],
)


def test_the_kinds_are_the_two_group_kinds():
    assert (PRODUCER_GROUP, CONSUMER_GROUP) == ("producer_group", "consumer_group")
    assert GRANT_KINDS == ("producer_group", "consumer_group")


def test_a_full_operator_operates_every_group():
    assert FULL_SCOPE.is_full
    assert FULL_SCOPE.operates_any
    assert FULL_SCOPE.may_operate_producer_group("payments")
    assert FULL_SCOPE.may_operate_consumer_group("anything")
    assert FULL_SCOPE.may_operate(GroupRef.producer("orders"))
    assert FULL_SCOPE.may_operate(GroupRef.consumer("billing"))


def test_a_viewer_operates_nothing():
    assert not NO_SCOPE.is_full
    assert not NO_SCOPE.operates_any
    assert not NO_SCOPE.may_operate_producer_group("payments")
    assert not NO_SCOPE.may_operate_consumer_group("billing")
    assert OperatorScope(producer_groups=frozenset(), consumer_groups=frozenset()) == NO_SCOPE


def test_a_scoped_operator_operates_its_groups_of_the_right_kind_only():
    scope = PAYMENTS_OPERATOR
    assert scope.producer_groups == frozenset({"payments"})
    assert scope.consumer_groups == frozenset({"billing"})
    assert not scope.is_full
    assert scope.operates_any
    assert scope.may_operate_producer_group("payments")
    assert not scope.may_operate_producer_group("orders")
    assert scope.may_operate_consumer_group("billing")
    assert not scope.may_operate_consumer_group("shipping")
    # A producer group's grant is not a consumer group's of the same name, and back.
    assert not scope.may_operate_consumer_group("payments")
    assert not scope.may_operate_producer_group("billing")
    assert scope.may_operate(GroupRef.producer("payments"))
    assert not scope.may_operate(GroupRef.consumer("payments"))
    assert scope.may_operate(GroupRef.consumer("billing"))
    assert not scope.may_operate(GroupRef.producer("billing"))


@pytest.mark.parametrize(
    "producer, consumer, operates",
    [
        (frozenset(), frozenset(), False),
        (frozenset({"p"}), frozenset(), True),
        (frozenset(), frozenset({"c"}), True),
        (None, frozenset(), True),
        (frozenset(), None, True),
    ],
)
def test_operates_any_means_some_group_of_either_kind(producer, consumer, operates):
    scope = OperatorScope(producer_groups=producer, consumer_groups=consumer)
    assert scope.operates_any is operates
    assert scope.is_full is False


def test_every_producer_group_but_named_consumer_groups_is_not_full():
    scope = OperatorScope(producer_groups=None, consumer_groups=frozenset({"c"}))
    assert not scope.is_full
    assert scope.may_operate_producer_group("any")
    assert not scope.may_operate_consumer_group("other")


def test_group_refs_name_their_kind():
    assert GroupRef.producer("a") == GroupRef(PRODUCER_GROUP, "a")
    assert GroupRef.consumer("a") == GroupRef(CONSUMER_GROUP, "a")
    assert GroupRef.producer("a") != GroupRef.consumer("a")


def test_the_scope_of_a_full_actor_ignores_its_grants():
    assert operator_scope_of(full=True, grants=[(PRODUCER_GROUP, "payments")]) is FULL_SCOPE
    assert operator_scope_of(full=True, grants=[]) is FULL_SCOPE


def test_the_scope_of_grants_collects_each_kind_and_ignores_unknown_kinds():
    scope = operator_scope_of(
        full=False,
        grants=[
            (PRODUCER_GROUP, "b"),
            (PRODUCER_GROUP, "a"),
            (PRODUCER_GROUP, "a"),
            (CONSUMER_GROUP, "c"),
            ("topic", "t"),
        ],
    )
    assert scope == OperatorScope(
        producer_groups=frozenset({"a", "b"}), consumer_groups=frozenset({"c"})
    )
    assert operator_scope_of(full=False, grants=[]) == NO_SCOPE


def test_the_scope_as_json_is_sorted_and_none_for_every_group():
    scope = OperatorScope(producer_groups=frozenset({"b", "a"}), consumer_groups=None)
    assert scope.as_json() == {"producer_groups": ["a", "b"], "consumer_groups": None}
    assert FULL_SCOPE.as_json() == {"producer_groups": None, "consumer_groups": None}
    assert NO_SCOPE.as_json() == {"producer_groups": [], "consumer_groups": []}


@pytest.mark.parametrize(
    "scope, text",
    [
        (FULL_SCOPE, "every group"),
        (NO_SCOPE, "no group"),
        (
            OperatorScope(producer_groups=frozenset({"payments"}), consumer_groups=frozenset()),
            "producer group payments",
        ),
        (
            OperatorScope(producer_groups=frozenset({"b", "a"}), consumer_groups=frozenset({"c"})),
            "producer groups a, b; consumer group c",
        ),
        (
            OperatorScope(producer_groups=frozenset(), consumer_groups=frozenset({"d", "c"})),
            "consumer groups c, d",
        ),
        (
            OperatorScope(producer_groups=None, consumer_groups=frozenset({"c"})),
            "every producer group; consumer group c",
        ),
        (
            OperatorScope(producer_groups=frozenset(), consumer_groups=None),
            "every consumer group",
        ),
    ],
)
def test_the_scope_in_words(scope, text):
    assert scope_description(scope) == text
