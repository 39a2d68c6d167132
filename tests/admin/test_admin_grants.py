"""Operator grants in the Django admin (``broker.admin.grants``, ``AccessKeyAdmin``): set on a
console user's and on an access key's page through ``broker.services.access.grants``, listed
read-only; a bad group name is a form error."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from broker.models import AccessKey, OperatorGrant
from broker.rules.grants import OperatorScope
from broker.selectors.grants import operator_scope
from broker.services.access.grants import operator_grants_set
from broker.services.topology.writes import access_key_create
from console.services import console_user_create

KEY_ADD = "/admin/broker/accesskey/add/"
USER_CHANGE = "/admin/auth/user/{pk}/change/"


def scope(producer: set[str], consumer: set[str]) -> OperatorScope:
    return OperatorScope(producer_groups=frozenset(producer), consumer_groups=frozenset(consumer))


def test_an_access_key_made_in_the_admin_gets_its_operator_grants(admin_client) -> None:
    response = admin_client.post(
        KEY_ADD,
        {
            "name": "payments-ops",
            "producer_groups": "",
            "consumer_groups": "",
            "operator_producer_groups": "payments, refunds",
            "operator_consumer_groups": "billing",
            "_save": "Save",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    key = AccessKey.objects.get(name="payments-ops")
    assert operator_scope(full=False, access_key_id=key.pk) == scope(
        {"payments", "refunds"}, {"billing"}
    )
    assert OperatorGrant.objects.filter(granted_by="admin:admin").count() == 3
    listing = admin_client.get("/admin/broker/accesskey/").content.decode()
    assert "producer groups payments, refunds; consumer group billing" in listing


def test_an_access_keys_page_shows_and_changes_its_grants(admin_client) -> None:
    key, _ = access_key_create(name="ops")
    operator_grants_set(
        access_key_id=key.pk, producer_groups=["payments"], consumer_groups=[], granted_by="t"
    )
    change = f"/admin/broker/accesskey/{key.pk}/change/"
    page = admin_client.get(change).content.decode()
    assert 'name="operator_producer_groups"' in page and 'value="payments"' in page

    response = admin_client.post(
        change,
        {
            "is_admin": "",
            "producer_groups": "",
            "consumer_groups": "",
            "operator_producer_groups": "orders",
            "operator_consumer_groups": "",
            "_save": "Save",
        },
    )

    assert response.status_code == 302
    assert operator_scope(full=False, access_key_id=key.pk) == scope({"orders"}, set())


def test_a_bad_group_name_is_a_form_error(admin_client) -> None:
    response = admin_client.post(
        KEY_ADD,
        {"name": "ops", "operator_consumer_groups": "bad/name", "_save": "Save"},
    )
    assert response.status_code == 200
    assert "must match" in response.content.decode()
    assert not AccessKey.objects.exists()


@pytest.mark.django_db
def test_a_console_users_page_sets_its_grants(admin_client) -> None:
    vic = console_user_create(username="vic", role="viewer", password="s3cret-enough")
    change = USER_CHANGE.format(pk=vic.pk)
    assert 'name="operator_producer_groups"' in admin_client.get(change).content.decode()

    response = admin_client.post(
        change,
        {
            "username": "vic",
            "is_active": "on",
            "groups": [str(Group.objects.get(name="viewer").pk)],
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
            "operator_producer_groups": "payments",
            "operator_consumer_groups": "billing",
            "_save": "Save",
        },
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    assert operator_scope(full=False, user_id=vic.pk) == scope({"payments"}, {"billing"})
    users = admin_client.get("/admin/auth/user/").content.decode()
    assert "producer group payments; consumer group billing" in users
    grants = admin_client.get("/admin/broker/operatorgrant/").content.decode()
    assert "console user vic" in grants
    assert admin_client.get("/admin/broker/operatorgrant/add/").status_code == 403
    assert get_user_model().objects.get(pk=vic.pk).groups.get().name == "viewer"
