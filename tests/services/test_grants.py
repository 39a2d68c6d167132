"""Operator grants: written by ``broker.services.access.grants.operator_grants_set``, read by
``broker.selectors.grants`` (the scope of a console user or an access key)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from broker.errors import InvalidInput
from broker.models import AccessKey, OperatorGrant
from broker.rules.grants import FULL_SCOPE, NO_SCOPE, OperatorScope
from broker.selectors.grants import (
    bulk_target_producer_groups,
    operated_producer_groups,
    operator_grants,
    operator_scope,
)
from broker.services.access.grants import operator_grants_set
from broker.services.operations.bulk import bulk_preview_selection
from broker.services.topology.writes import access_key_create, producer_group_create
from tests.support import prepare

pytestmark = pytest.mark.django_db


@pytest.fixture
def paula():
    """A console user who will operate the payments team's groups."""
    return get_user_model().objects.create_user("paula", password="x" * 12)


@pytest.fixture
def payments_key() -> AccessKey:
    key, _ = access_key_create(name="payments-ops")
    return key


def scope(producer: set[str], consumer: set[str]) -> OperatorScope:
    return OperatorScope(producer_groups=frozenset(producer), consumer_groups=frozenset(consumer))


def test_a_user_without_grants_operates_nothing_and_a_full_one_everything(paula):
    assert operator_scope(full=False, user_id=paula.pk) == NO_SCOPE
    assert operator_scope(full=True, user_id=paula.pk) is FULL_SCOPE


def test_grants_set_exactly_the_groups_given(paula, django_assert_num_queries):
    got = operator_grants_set(
        user_id=paula.pk,
        producer_groups=["payments", "refunds"],
        consumer_groups=["billing"],
        granted_by="create_console_user",
    )
    assert got == scope({"payments", "refunds"}, {"billing"})
    with django_assert_num_queries(1):
        assert operator_scope(full=False, user_id=paula.pk) == got
    first = OperatorGrant.objects.get(user=paula, group="payments")

    again = operator_grants_set(
        user_id=paula.pk,
        producer_groups=["payments"],
        consumer_groups=["ledger"],
        granted_by="admin:root",
    )

    assert again == scope({"payments"}, {"ledger"})
    assert operator_scope(full=False, user_id=paula.pk) == again
    # The grant that stays is the same row, with who gave it first.
    kept = OperatorGrant.objects.get(user=paula, group="payments")
    assert (kept.pk, kept.granted_by) == (first.pk, "create_console_user")
    assert OperatorGrant.objects.get(user=paula, group="ledger").granted_by == "admin:root"
    assert [(g.kind, g.group) for g in operator_grants(user_id=paula.pk)] == [
        ("consumer_group", "ledger"),
        ("producer_group", "payments"),
    ]

    operator_grants_set(
        user_id=paula.pk, producer_groups=[], consumer_groups=[], granted_by="admin:root"
    )
    assert operator_scope(full=False, user_id=paula.pk) == NO_SCOPE


def test_a_keys_grants_are_its_own(paula, payments_key):
    operator_grants_set(
        access_key_id=payments_key.pk,
        producer_groups=["payments"],
        consumer_groups=[],
        granted_by="create_access_key",
    )
    assert operator_scope(full=False, access_key_id=payments_key.pk) == scope({"payments"}, set())
    assert operator_scope(full=False, user_id=paula.pk) == NO_SCOPE
    assert list(operated_producer_groups(access_key_id=payments_key.pk)) == ["payments"]


def test_a_bad_group_name_is_refused_and_nothing_changes(paula):
    operator_grants_set(
        user_id=paula.pk, producer_groups=["payments"], consumer_groups=[], granted_by="t"
    )
    with pytest.raises(InvalidInput) as refused:
        operator_grants_set(
            user_id=paula.pk,
            producer_groups=["ok", "no spaces"],
            consumer_groups=[],
            granted_by="t",
        )
    assert refused.value.code == "invalid_name"
    assert operator_scope(full=False, user_id=paula.pk) == scope({"payments"}, set())


def test_one_holder_exactly(paula, payments_key):
    for holders in ({}, {"user_id": paula.pk, "access_key_id": payments_key.pk}):
        with pytest.raises(ValueError):
            operator_grants_set(**holders, producer_groups=[], consumer_groups=[], granted_by="t")
        with pytest.raises(ValueError):
            operator_scope(full=False, **holders)
    # The table refuses a grant with no holder or two.
    with pytest.raises(IntegrityError), transaction.atomic():
        OperatorGrant.objects.create(kind="producer_group", group="x")
    with pytest.raises(IntegrityError), transaction.atomic():
        OperatorGrant.objects.create(
            user=paula, access_key=payments_key, kind="producer_group", group="x"
        )


def test_deleting_the_holder_deletes_its_grants(paula, payments_key):
    operator_grants_set(user_id=paula.pk, producer_groups=["p"], consumer_groups=[], granted_by="t")
    operator_grants_set(
        access_key_id=payments_key.pk, producer_groups=["p"], consumer_groups=[], granted_by="t"
    )
    paula.delete()
    payments_key.delete()
    assert not OperatorGrant.objects.exists()


def test_a_bulks_producer_groups_are_those_of_its_targets(topic):
    producer_group_create(name="payments", check_url=None)
    producer_group_create(name="orders", check_url=None)
    txs = [prepare(producer_group="payments"), prepare(producer_group="orders")]
    txs.append(prepare(producer_group="payments"))
    entry = bulk_preview_selection(
        action="rollback",
        reason="r",
        actor="console:x",
        via="console",
        transaction_ids=[t.pk for t in txs],
    )
    assert bulk_target_producer_groups(entry.pk) == {"payments", "orders"}
