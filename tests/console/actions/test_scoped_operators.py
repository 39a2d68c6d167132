"""Operators scoped to groups in the console: Paula operates producer group ``payments`` and
consumer group ``billing`` only. She sees every page a viewer sees, acts on the transactions
of payments, gets 403 and no controls on the others', and her bulk previews leave the others
out and say so. Olga is a full operator; Vic a viewer."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.views import View

from broker.models import AuditEntry, ConsumerGroup, ProducerGroup, Transaction
from broker.rules.grants import FULL_SCOPE, NO_SCOPE, GroupRef
from broker.services.operations.bulk import bulk_preview_selection
from broker.services.topology.writes import consumer_group_create, producer_group_create
from console.permissions import (
    ConsumerGroupOperateRequired,
    may_operate_consumer_group,
    may_operate_producer_group,
    operator_scope_of_user,
)
from console.roles import OPERATE
from console.services import console_user_create
from tests.console.actions.test_actions import action_url, said
from tests.console.conftest import PASSWORD, signed_in
from tests.services.test_operator import discarded
from tests.support import prepare


def paula_make(username: str = "paula"):
    return console_user_create(
        username=username,
        role="operator",
        password=PASSWORD,
        producer_groups=["payments"],
        consumer_groups=["billing"],
    )


@pytest.fixture
def groups(topic):
    producer_group_create(name="payments", check_url=None)
    producer_group_create(name="orders", check_url=None)
    consumer_group_create(name="billing")
    consumer_group_create(name="shipping")


@pytest.fixture
def paula(db) -> Client:
    client = Client()
    client.force_login(paula_make())
    return client


@pytest.fixture
def olga(db) -> Client:
    client = Client()
    signed_in(client, "operator", username="olga")
    return client


@pytest.fixture
def vic(db) -> Client:
    client = Client()
    signed_in(client, "viewer", username="vic")
    return client


def buttons(client: Client, tx: Transaction) -> set[str]:
    html = client.get(f"/console/transactions/{tx.pk}/").content.decode()
    return set(re.findall(r'/actions/([a-z-]+)/"', html))


def checkboxes(client: Client) -> set[str]:
    html = client.get("/console/transactions/").content.decode()
    return set(re.findall(r'name="transaction_id" value="([^"]+)"', html))


# --- Object permissions -------------------------------------------------------------------------


def test_a_scoped_operators_object_permissions(groups):
    user = paula_make()
    mine, theirs = prepare(producer_group="payments"), prepare(producer_group="orders")

    assert user.has_perm("console.view_console")
    assert not user.has_perm(OPERATE)  # no operator role without an object
    assert user.has_perm(OPERATE, mine)
    assert not user.has_perm(OPERATE, theirs)
    assert user.has_perm(OPERATE, ProducerGroup.objects.get(name="payments"))
    assert not user.has_perm(OPERATE, ProducerGroup.objects.get(name="orders"))
    assert user.has_perm(OPERATE, ConsumerGroup.objects.get(name="billing"))
    assert not user.has_perm(OPERATE, ConsumerGroup.objects.get(name="shipping"))
    assert user.has_perm(OPERATE, GroupRef.consumer("billing"))
    assert not user.has_perm(OPERATE, "payments")  # not a group object
    assert not user.has_perm("console.manage_console", mine)
    assert may_operate_producer_group(user, "payments")
    assert not may_operate_producer_group(user, "orders")
    assert may_operate_consumer_group(user, "billing")
    assert not may_operate_consumer_group(user, "shipping")
    assert not may_operate_consumer_group(user, "payments")


def test_full_operators_viewers_and_anonymous_visitors(groups, console_user):
    olga, vic = console_user("operator"), console_user("viewer")
    theirs = prepare(producer_group="orders")
    assert operator_scope_of_user(olga) is FULL_SCOPE
    assert olga.has_perm(OPERATE, theirs) and may_operate_consumer_group(olga, "shipping")
    assert operator_scope_of_user(vic) == NO_SCOPE
    assert not vic.has_perm(OPERATE, theirs)
    assert operator_scope_of_user(AnonymousUser()) == NO_SCOPE
    assert not may_operate_consumer_group(AnonymousUser(), "billing")


def test_the_scope_is_read_once_per_user_object(groups, django_assert_num_queries):
    user = paula_make()
    user = type(user).objects.get(pk=user.pk)
    operator_scope_of_user(user)
    with django_assert_num_queries(0):
        assert may_operate_producer_group(user, "payments")
        assert not may_operate_consumer_group(user, "shipping")


def test_a_grant_taken_back_by_a_role_change_takes_the_rights_away(groups):
    paula_make()
    user = console_user_create(username="paula", role="viewer", password=None)
    assert operator_scope_of_user(user) == NO_SCOPE


class _GroupAction(ConsumerGroupOperateRequired, View):
    group_url_kwarg = "group"

    def post(self, request, group):
        return HttpResponse(f"operated {group}")


def test_the_consumer_group_mixin_lets_in_operators_of_the_group_only(groups, console_user):
    factory = RequestFactory()
    view = _GroupAction.as_view()

    def post(user, group):
        request = factory.post(f"/x/{group}/")
        request.user = user
        return view(request, group=group)

    assert post(paula_make(), "billing").content == b"operated billing"
    assert post(console_user("operator"), "shipping").status_code == 200
    with pytest.raises(PermissionDenied):
        post(paula_make("paula2"), "shipping")
    with pytest.raises(PermissionDenied):
        post(console_user("viewer"), "billing")
    assert post(AnonymousUser(), "billing").status_code == 302  # to the sign-in page


# --- One transaction ----------------------------------------------------------------------------


def test_a_scoped_operator_commits_a_transaction_of_her_group(paula, groups):
    tx = prepare(producer_group="payments")

    response = paula.post(action_url(tx, "commit"), {"reason": "payments settled it by hand"})

    assert response.status_code == 302
    tx.refresh_from_db()
    assert (tx.state, tx.resolved_by) == ("COMMITTED", "operator")
    assert said(response)[0].startswith(f"Committed {tx.pk}")
    assert AuditEntry.objects.get().actor == "console:paula"


@pytest.mark.parametrize("action", ["commit", "rollback", "resume-check", "check-now"])
def test_every_action_on_another_groups_transaction_is_403(paula, groups, action):
    theirs = prepare(producer_group="orders")
    gone = discarded(prepare(producer_group="orders"))

    for tx in (theirs, gone):
        assert paula.post(action_url(tx, action), {"reason": "r"}).status_code == 403
        tx.refresh_from_db()
    assert (theirs.state, gone.state) == ("PREPARED", "DISCARDED")
    assert not AuditEntry.objects.exists()


def test_an_unknown_transaction_is_404_for_a_scoped_operator(paula, groups):
    assert (
        paula.post("/console/transactions/NO-SUCH/actions/commit/", {"reason": "r"}).status_code
        == 404
    )


def test_controls_are_drawn_on_her_groups_transactions_only(paula, olga, groups):
    mine, theirs = prepare(producer_group="payments"), prepare(producer_group="orders")

    assert buttons(paula, mine) == {"commit", "rollback", "check-now"}
    assert buttons(paula, theirs) == set()
    page = paula.get(f"/console/transactions/{theirs.pk}/").content.decode()
    assert 'id="no-actions"' in page and "producer group payments; consumer group billing" in page
    assert "Commit…" not in page and 'data-dialog="dialog-commit"' not in page
    assert buttons(olga, theirs) == {"commit", "rollback", "check-now"}

    assert checkboxes(paula) == {mine.pk}
    assert checkboxes(olga) == {mine.pk, theirs.pk}
    listing = paula.get("/console/transactions/").content.decode()
    assert 'id="operator-scope"' in listing and 'id="bulk-form"' in listing
    assert "(operator of producer group payments; consumer group billing)" in listing
    # The live row partial follows the same rule.
    row = paula.get(f"/console/transactions/{theirs.pk}/row/").content.decode()
    assert 'class="select"></td>' in row and "checkbox" not in row


def test_a_viewer_still_sees_no_controls(vic, groups):
    tx = prepare(producer_group="payments")
    assert buttons(vic, tx) == set()
    page = vic.get(f"/console/transactions/{tx.pk}/").content.decode()
    assert (
        'id="no-actions"' not in page
        and 'id="bulk-form"' not in vic.get("/console/transactions/").content.decode()
    )
    assert "(viewer)" in page


def test_a_scoped_operator_sees_every_page_a_viewer_sees(paula, groups):
    for url in (
        "/console/",
        "/console/transactions/",
        "/console/audit/",
        "/console/producer-groups/",
        "/console/consumer-groups/",
        "/console/alerts/",
    ):
        assert paula.get(url).status_code == 200, url
    assert paula.get("/console/producer-groups/new/").status_code == 403  # admin only


# --- Bulk ---------------------------------------------------------------------------------------


def test_a_bulk_preview_on_a_selection_leaves_other_groups_out(paula, groups):
    mine = [prepare(producer_group="payments"), prepare(producer_group="payments")]
    theirs = prepare(producer_group="orders")

    response = paula.post(
        "/console/bulk/",
        {
            "action": "rollback",
            "reason": "incident 12",
            "scope": "selection",
            "transaction_id": [mine[0].pk, theirs.pk, mine[1].pk],
        },
    )

    bulk = AuditEntry.objects.get(action="bulk-rollback")
    assert response["Location"] == f"/console/bulk/{bulk.pk}/"
    assert bulk.total == 2 and bulk.scope["excluded"]["count"] == 1
    page = paula.get(response["Location"]).content.decode()
    assert 'id="bulk-excluded"' in page
    assert "<strong>1</strong> transaction of producer group <code>orders</code> (1)" in page
    assert theirs.pk not in page.split('id="bulk-excluded"')[1].split("</table>")[1]
    assert f'action="/console/bulk/{bulk.pk}/apply/"' in page


def test_a_bulk_preview_on_a_filter_leaves_other_groups_out(paula, groups):
    mine = prepare(producer_group="payments")
    for _ in range(3):
        prepare(producer_group="orders")

    paula.post("/console/bulk/", {"action": "commit", "reason": "r", "scope": "filter"})

    bulk = AuditEntry.objects.get(action="bulk-commit")
    assert list(bulk.targets.values_list("transaction_id", flat=True)) == [mine.pk]
    assert bulk.scope["excluded"] == {
        "count": 3,
        "producer_groups": [{"producer_group": "orders", "count": 3}],
    }


def test_a_bulk_of_only_other_groups_is_refused_with_what_was_left_out(paula, groups):
    theirs = prepare(producer_group="orders")
    response = paula.post(
        "/console/bulk/",
        {"action": "commit", "reason": "r", "scope": "selection", "transaction_id": [theirs.pk]},
    )
    assert response.status_code == 302
    assert "1 transaction of producer group orders (1) left out" in said(response)[-1]
    assert not AuditEntry.objects.exists()


def test_she_cannot_confirm_a_bulk_reaching_other_groups(
    paula, groups, django_capture_on_commit_callbacks
):
    mine, theirs = prepare(producer_group="payments"), prepare(producer_group="orders")
    bulk = bulk_preview_selection(
        action="rollback",
        reason="r",
        actor="console:olga",
        via="console",
        transaction_ids=[mine.pk, theirs.pk],
    )

    page = paula.get(f"/console/bulk/{bulk.pk}/").content.decode()
    assert "/apply/" not in page and 'id="bulk-not-yours"' in page
    assert paula.post(f"/console/bulk/{bulk.pk}/apply/").status_code == 403
    bulk.refresh_from_db()
    assert bulk.state == "previewed"


def test_a_viewer_may_not_preview_or_confirm(vic, groups):
    tx = prepare(producer_group="payments")
    assert (
        vic.post(
            "/console/bulk/",
            {"action": "commit", "reason": "r", "scope": "selection", "transaction_id": [tx.pk]},
        ).status_code
        == 403
    )
