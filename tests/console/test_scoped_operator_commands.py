"""Making scoped operators from the command line: ``create_console_user NAME --role operator
--producer-group G --consumer-group C`` and ``create_access_key NAME
--operator-producer-group G --operator-consumer-group C``."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from broker.models import AccessKey, OperatorGrant
from broker.rules.grants import FULL_SCOPE, NO_SCOPE, OperatorScope
from broker.selectors.grants import operator_scope
from console.permissions import operator_scope_of_user
from console.roles import OPERATE, VIEW
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

PASSWORD = ["--password", "s3cret-enough"]


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def user(username: str):
    return get_user_model().objects.get(username=username)


def scope(producer: set[str], consumer: set[str]) -> OperatorScope:
    return OperatorScope(producer_groups=frozenset(producer), consumer_groups=frozenset(consumer))


def test_create_console_user_makes_an_operator_of_named_groups():
    out, _ = run(
        "create_console_user",
        "paula",
        "--role",
        "operator",
        "--producer-group",
        "payments",
        "--producer-group",
        "refunds",
        "--consumer-group",
        "billing",
        *PASSWORD,
    )

    assert out.strip() == (
        "Console user paula: operator of producer groups payments, refunds; consumer group "
        "billing only, viewer elsewhere."
    )
    paula = user("paula")
    assert sorted(paula.groups.values_list("name", flat=True)) == ["viewer"]
    assert paula.has_perm(VIEW) and not paula.has_perm(OPERATE)
    assert operator_scope_of_user(paula) == scope({"payments", "refunds"}, {"billing"})
    assert set(OperatorGrant.objects.values_list("granted_by", flat=True)) == {
        "create_console_user"
    }


def test_running_again_sets_the_groups_anew_and_without_groups_makes_a_full_operator():
    run("create_console_user", "paula", "--role", "operator", "--producer-group", "a", *PASSWORD)
    run("create_console_user", "paula", "--role", "operator", "--consumer-group", "c", *PASSWORD)
    assert operator_scope_of_user(user("paula")) == scope(set(), {"c"})

    out, _ = run("create_console_user", "paula", "--role", "operator", *PASSWORD)

    assert out.strip() == "Console user paula: operator."
    assert operator_scope_of_user(user("paula")) is FULL_SCOPE
    assert not OperatorGrant.objects.exists()

    run("create_console_user", "paula", "--role", "viewer", *PASSWORD)
    assert operator_scope_of_user(user("paula")) == NO_SCOPE


@pytest.mark.parametrize("role", ["viewer", "admin"])
def test_groups_belong_to_the_operator_role_only(role):
    with pytest.raises(CommandError, match="use them with the role operator"):
        run("create_console_user", "vic", "--role", role, "--producer-group", "a", *PASSWORD)
    assert not get_user_model().objects.filter(username="vic").exists()


def test_a_bad_group_name_creates_nobody():
    with pytest.raises(CommandError, match="must match"):
        run(
            "create_console_user",
            "paula",
            "--role",
            "operator",
            "--producer-group",
            "no spaces",
            *PASSWORD,
        )
    assert not get_user_model().objects.filter(username="paula").exists()
    assert not OperatorGrant.objects.exists()


def test_create_access_key_makes_a_key_operating_named_groups(topic):
    out, err = run(
        "create_access_key",
        "payments-ops",
        "--operator-producer-group",
        "payments",
        "--operator-consumer-group",
        "billing",
        "--producer-group",
        "payments",
    )

    key = AccessKey.objects.get(name="payments-ops")
    assert not key.is_admin and key.producer_groups == ["payments"]
    assert operator_scope(full=False, access_key_id=key.pk) == scope({"payments"}, {"billing"})
    assert (
        "Access key payments-ops (producer:payments, operator:producer:payments, "
        "operator:consumer:billing). Token:" in err
    )
    token = out.strip().splitlines()[-1]
    # The token works, and the key operates only its group.
    response = client_for(token).post(
        "/api/v1/transactions/0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A0A/resolve",
        {"action": "commit", "reason": "r"},
        format="json",
    )
    assert response.status_code == 404


def test_create_access_key_refuses_grants_on_an_admin_key_and_bad_names():
    with pytest.raises(CommandError, match="admin key operates every group"):
        run("create_access_key", "root", "--admin", "--operator-producer-group", "payments")
    with pytest.raises(CommandError, match="must match"):
        run("create_access_key", "ops", "--operator-consumer-group", "no spaces")
    assert not AccessKey.objects.exists()
    assert not OperatorGrant.objects.exists()


def test_create_access_key_without_grants_makes_none():
    run("create_access_key", "app", "--producer-group", "G")
    key = AccessKey.objects.get(name="app")
    assert operator_scope(full=False, access_key_id=key.pk) == NO_SCOPE
