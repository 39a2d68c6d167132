"""/api/v1/alert-receivers: Halfmoon's alert receivers, an addition to api-v1 (docs/api.md).
Admin key only; the same service as the console (broker.services.alerts.receivers); the
signing secret answered by the create only, as the console shows it once."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from broker.models import Alert, AlertNotification, AlertReceiver
from broker.services.alerts.rules import alert_rule_create
from tests.api_helpers import assert_error, post
from tests.console.conftest import signed_in

RECEIVERS = "/api/v1/alert-receivers"
HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture
def document(anonymous, db) -> dict[str, Any]:
    response = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def test_an_admin_creates_lists_reads_changes_and_deletes_a_receiver(owner):
    created = post(owner, RECEIVERS, {"name": "team", "kind": "slack", "url": HOOK})

    assert created.status_code == 201
    body = created.json()
    stored = AlertReceiver.objects.get()
    assert body == {
        "name": "team",
        "kind": "slack",
        "url": HOOK,
        "emails": [],
        "enabled": True,
        "created_timestamp": stored.created_timestamp,
        "secret": stored.secret,
    }
    assert len(stored.secret) == 64
    shown = {k: v for k, v in body.items() if k != "secret"}
    assert owner.get(RECEIVERS).json() == [shown]  # the secret is answered once only
    assert owner.get(f"{RECEIVERS}/team").json() == shown

    changed = owner.patch(f"{RECEIVERS}/team", {"enabled": False}, format="json")
    assert changed.status_code == 200
    assert changed.json() == {**shown, "enabled": False}  # the url stays: not sent
    moved = owner.patch(f"{RECEIVERS}/team", {"url": "http://127.0.0.1:10/x"}, format="json")
    assert (moved.json()["url"], moved.json()["enabled"]) == ("http://127.0.0.1:10/x", False)
    assert "secret" not in moved.json()
    assert AlertReceiver.objects.get().secret == stored.secret  # kept by a change

    assert owner.delete(f"{RECEIVERS}/team").status_code == 204
    assert not AlertReceiver.objects.exists()
    assert_error(owner.get(f"{RECEIVERS}/team"), 404, "alert_receiver_not_found")
    assert_error(owner.delete(f"{RECEIVERS}/team"), 404, "alert_receiver_not_found")
    assert_error(owner.patch(f"{RECEIVERS}/team", {}, format="json"), 404)


def test_an_email_receiver_takes_addresses(owner):
    created = post(owner, RECEIVERS, {"name": "mail", "kind": "email", "emails": ["a@example.com"]})
    assert created.status_code == 201
    assert (created.json()["emails"], created.json()["url"]) == (["a@example.com"], "")

    changed = owner.patch(
        f"{RECEIVERS}/mail", {"emails": ["a@example.com", " b@example.com "]}, format="json"
    )

    assert changed.json()["emails"] == ["a@example.com", "b@example.com"]
    assert AlertReceiver.objects.get().emails == ["a@example.com", "b@example.com"]
    error = assert_error(
        owner.patch(f"{RECEIVERS}/mail", {"emails": ["nope"]}, format="json"), 400, "invalid_email"
    )
    assert error["details"]["field"] == "emails"
    assert_error(
        owner.patch(f"{RECEIVERS}/mail", {"emails": []}, format="json"), 400, "emails_required"
    )
    assert AlertReceiver.objects.get().emails == ["a@example.com", "b@example.com"]


def test_a_receiver_made_by_the_api_is_the_one_the_console_lists(owner, client):
    post(owner, RECEIVERS, {"name": "team", "kind": "alertmanager", "url": HOOK})
    secret = AlertReceiver.objects.get().secret
    signed_in(client, "admin")

    listing = client.get(reverse("console:alert_receivers")).content.decode()

    assert 'id="receiver-team"' in listing and HOOK in listing
    assert secret not in listing
    owner.delete(f"{RECEIVERS}/team")
    assert (
        'id="receiver-team"' not in client.get(reverse("console:alert_receivers")).content.decode()
    )


def test_deleting_a_receiver_fails_its_pending_notifications(owner):
    post(owner, RECEIVERS, {"name": "team", "kind": "alertmanager", "url": HOOK})
    rule = alert_rule_create(name="stuck", kind="oldest_pending")
    alert = Alert.objects.create(
        rule=rule,
        rule_name="stuck",
        kind="oldest_pending",
        severity="warning",
        subject_label="producer_group",
        subject="G",
    )
    AlertNotification.objects.create(
        alert=alert, receiver=AlertReceiver.objects.get(), receiver_name="team", event="firing"
    )

    assert owner.delete(f"{RECEIVERS}/team").status_code == 204

    notification = AlertNotification.objects.get()
    assert (notification.state, notification.last_error) == ("failed", "the receiver was deleted")


def test_only_an_admin_key_may_touch_receivers(anonymous, producer, owner):
    post(owner, RECEIVERS, {"name": "team", "kind": "slack", "url": HOOK})

    assert_error(anonymous.get(RECEIVERS), 401, "not_authenticated")
    assert_error(anonymous.get(f"{RECEIVERS}/team"), 401, "not_authenticated")
    assert_error(producer.get(RECEIVERS), 403, "permission_denied")
    assert_error(producer.get(f"{RECEIVERS}/team"), 403, "permission_denied")
    assert_error(post(producer, RECEIVERS, {"name": "x", "kind": "slack", "url": HOOK}), 403)
    assert_error(producer.patch(f"{RECEIVERS}/team", {"enabled": False}, format="json"), 403)
    assert_error(producer.delete(f"{RECEIVERS}/team"), 403)
    assert list(AlertReceiver.objects.values_list("name", "enabled")) == [("team", True)]


def test_a_duplicate_name_is_409(owner):
    post(owner, RECEIVERS, {"name": "team", "kind": "slack", "url": HOOK})

    error = assert_error(
        post(owner, RECEIVERS, {"name": "team", "kind": "slack", "url": HOOK}), 409
    )

    assert error["code"] == "alert_receiver_exists"


def test_a_url_the_rule_refuses_is_400_naming_the_field(owner):
    answer = post(
        owner, RECEIVERS, {"name": "meta", "kind": "alertmanager", "url": "http://169.254.169.254/"}
    )

    error = assert_error(answer, 400, "webhook_url_not_allowed")
    assert error["details"]["field"] == "url"
    assert_error(post(owner, RECEIVERS, {"name": "x", "kind": "slack"}), 400, "url_required")
    assert not AlertReceiver.objects.exists()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "x", "kind": "pager"}, "kind"),
        ({"name": "x y", "kind": "slack", "url": HOOK}, "name"),
        ({"kind": "slack", "url": HOOK}, "name"),
        ({"name": "x", "kind": "slack", "url": 7}, "url"),
        ({"name": "x", "kind": "email", "emails": "a@example.com"}, "emails"),
        ({"name": "x", "kind": "email", "emails": [1]}, "emails"),
        ({"name": "x", "kind": "slack", "url": HOOK, "enabled": "yes"}, "enabled"),
    ],
)
def test_invalid_input_is_refused_naming_the_field(owner, data, field):
    error = assert_error(post(owner, RECEIVERS, data), 400, "invalid_input")

    assert field in error["details"]["fields"]
    assert not AlertReceiver.objects.exists()


def test_the_schema_documents_the_receivers_endpoints(document):
    paths = document["paths"]
    assert set(paths[RECEIVERS]) >= {"get", "post"}
    assert set(paths[f"{RECEIVERS}/{{name}}"]) >= {"get", "patch", "delete"}
    assert {"201", "400", "401", "403", "409", "413", "503"} <= set(
        paths[RECEIVERS]["post"]["responses"]
    )
    schemas = document["components"]["schemas"]

    def schema_of(response: dict[str, Any]) -> dict[str, Any]:
        ref = response["content"]["application/json"]["schema"]
        ref = ref.get("items", ref)["$ref"]
        return schemas[ref.rsplit("/", 1)[1]]

    created = schema_of(paths[RECEIVERS]["post"]["responses"]["201"])
    assert "secret" in created["properties"]
    assert "secret" not in schema_of(paths[RECEIVERS]["get"]["responses"]["200"])["properties"]
    detail = paths[f"{RECEIVERS}/{{name}}"]
    assert "secret" not in schema_of(detail["get"]["responses"]["200"])["properties"]
    assert "secret" not in schema_of(detail["patch"]["responses"]["200"])["properties"]
    assert schemas["AlertReceiverKindEnum"]["enum"] == ["alertmanager", "slack", "email"]
