"""The Django admin writes through the services (broker/admin/): objects made at /admin/ work
like those made through the API. Every test drives the admin's own views, signed in as a
superuser (pytest-django's ``admin_client``)."""

from __future__ import annotations

import hashlib
import re

import pytest

from broker.conf import conf
from broker.models import (
    AccessKey,
    ConsumeQueue,
    ConsumerGroup,
    Message,
    ProducerGroup,
    Topic,
    Transaction,
)
from broker.services.commitlog.storage import system_topic_ensure
from broker.services.topology.writes import producer_group_create, topic_create
from tests.api_helpers import send_half, send_message
from tests.conftest import client_for
from tests.support import check_server_running, due_at, round_for

ADD = "/admin/broker/{model}/add/"
CHANGE = "/admin/broker/{model}/{pk}/change/"


def add(admin_client, model: str, **data):
    return admin_client.post(ADD.format(model=model), {**data, "_save": "Save"})


def change(admin_client, model: str, pk: int, **data):
    return admin_client.post(CHANGE.format(model=model, pk=pk), {**data, "_save": "Save"})


def form_errors(response) -> dict[str, list[str]]:
    """The admin form's errors of a re-rendered add or change page (200)."""
    assert response.status_code == 200, response.status_code
    return {
        name: list(errors) for name, errors in response.context["adminform"].form.errors.items()
    }


# --- Topics ---------------------------------------------------------------------------------------


def test_a_topic_made_in_the_admin_has_its_consume_queues_and_takes_sends(admin_client, owner):
    response = add(admin_client, "topic", name="AdminTopic", queue_nums=3)

    assert response.status_code == 302, form_errors(response)
    topic = Topic.objects.get(name="AdminTopic")
    assert topic.queue_nums == 3 and not topic.system
    queues = ConsumeQueue.objects.filter(topic="AdminTopic")
    assert sorted(queues.values_list("queue_id", flat=True)) == [0, 1, 2]

    sent = send_message(owner, topic="AdminTopic")

    assert sent.status_code == 201, sent.content
    assert sent.json()["queue_id"] in {0, 1, 2}


@pytest.mark.parametrize(
    ("name", "queue_nums", "field"),
    [
        ("RMQ_SYS_TRANS_HALF_TOPIC", 1, "name"),
        ("%DLQ%C", 1, "name"),
        ("with space", 1, "name"),
        ("Fine", 0, "queue_nums"),
        ("Fine", 1025, "queue_nums"),
    ],
)
def test_the_admin_refuses_a_topic_the_service_refuses(admin_client, name, queue_nums, field):
    response = add(admin_client, "topic", name=name, queue_nums=queue_nums)

    assert field in form_errors(response)
    assert not Topic.objects.filter(name=name).exists()
    assert not ConsumeQueue.objects.filter(topic=name).exists()


def test_a_topic_name_taken_is_a_form_error(admin_client, topic):
    response = add(admin_client, "topic", name="TranTest", queue_nums=2)

    assert "name" in form_errors(response)
    assert Topic.objects.get(name="TranTest").queue_nums == 4


def test_more_queues_in_the_admin_adds_consume_queues(admin_client, owner):
    topic = topic_create(name="Growing", queue_nums=2)

    response = change(admin_client, "topic", topic.pk, queue_nums=5)

    assert response.status_code == 302, form_errors(response)
    assert Topic.objects.get(pk=topic.pk).queue_nums == 5
    queues = ConsumeQueue.objects.filter(topic="Growing").values_list("queue_id", flat=True)
    assert sorted(queues) == [0, 1, 2, 3, 4]
    assert send_message(owner, topic="Growing").status_code == 201


def test_the_admin_sets_and_changes_a_topics_message_type(admin_client, owner):
    response = add(admin_client, "topic", name="Typed", queue_nums=1, message_type="DELAY")
    assert response.status_code == 302, form_errors(response)
    topic = Topic.objects.get(name="Typed")
    assert topic.message_type == "DELAY"

    response = change(admin_client, "topic", topic.pk, queue_nums=1, message_type="NORMAL")

    assert response.status_code == 302, form_errors(response)
    assert Topic.objects.get(pk=topic.pk).message_type == "NORMAL"
    assert send_message(owner, topic="Typed").status_code == 201
    response = change(admin_client, "topic", topic.pk, queue_nums=2)  # left out: unchanged
    assert response.status_code == 302, form_errors(response)
    assert Topic.objects.get(pk=topic.pk).message_type == "NORMAL"
    assert "message_type" in form_errors(
        add(admin_client, "topic", name="Bad", queue_nums=1, message_type="LITE")
    )
    assert "NORMAL" in admin_client.get("/admin/broker/topic/").content.decode()


def test_the_admin_never_removes_queues(admin_client):
    topic = topic_create(name="Shrinking", queue_nums=4)

    response = change(admin_client, "topic", topic.pk, queue_nums=2)

    assert "queue_nums" in form_errors(response)
    assert Topic.objects.get(pk=topic.pk).queue_nums == 4
    assert ConsumeQueue.objects.filter(topic="Shrinking").count() == 4


def test_system_topics_and_topic_deletion_are_not_for_the_admin(admin_client, topic):
    system = system_topic_ensure("RMQ_SYS_TRANS_HALF_TOPIC", 2)

    assert change(admin_client, "topic", system.pk, queue_nums=8).status_code == 403
    assert Topic.objects.get(pk=system.pk).queue_nums == 2
    delete = f"/admin/broker/topic/{topic.pk}/delete/"
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert Topic.objects.filter(pk=topic.pk).exists()


# --- Producer and consumer groups ---------------------------------------------------------------


def test_a_producer_group_made_in_the_admin_has_a_secret_and_its_checks_are_signed(
    admin_client, topic, producer
):
    with check_server_running(answer=lambda check: (200, {"state": "COMMIT_MESSAGE"})) as server:
        response = add(admin_client, "producergroup", name="G", check_url=server.url)

        assert response.status_code == 302, form_errors(response)
        group = ProducerGroup.objects.get(name="G")
        assert re.fullmatch(r"[0-9a-f]{64}", group.check_secret)
        server.secrets["G"] = group.check_secret
        half = send_half(producer)
        assert half.status_code == 201, half.content
        tx = Transaction.objects.get(pk=half.json()["transaction_id"])
        round_for(tx, due_at(tx))

        [check] = server.received()
    assert check.signature_valid is True


def test_two_producer_groups_made_in_the_admin_have_different_secrets(admin_client):
    add(admin_client, "producergroup", name="G1", check_url="")
    add(admin_client, "producergroup", name="G2", check_url="")

    secrets = set(ProducerGroup.objects.values_list("check_secret", flat=True))
    assert len(secrets) == 2 and "" not in secrets
    assert ProducerGroup.objects.get(name="G1").check_url is None  # its producers poll


def test_changing_a_check_url_in_the_admin_keeps_the_secret(admin_client):
    group = producer_group_create(name="G", check_url=None)
    ProducerGroup.objects.filter(pk=group.pk).update(unreachable_since=1, last_check_error="x")

    response = change(admin_client, "producergroup", group.pk, check_url="http://192.168.0.7/check")

    assert response.status_code == 302, form_errors(response)
    changed = ProducerGroup.objects.get(pk=group.pk)
    assert changed.check_url == "http://192.168.0.7/check"
    assert changed.check_secret == group.check_secret
    assert changed.unreachable_since is None and changed.last_check_error == ""


@pytest.mark.parametrize("model", ["producergroup", "consumergroup"])
def test_the_admin_refuses_a_reserved_group_name(admin_client, model):
    response = add(admin_client, model, name="CID_RMQ_SYS_TRANS", max_delivery_attempts=3)

    assert "name" in form_errors(response)
    assert not ProducerGroup.objects.exists() and not ConsumerGroup.objects.exists()


def test_a_consumer_group_in_the_admin_starts_at_the_configured_attempts(admin_client):
    page = admin_client.get(ADD.format(model="consumergroup"))
    assert page.context["adminform"].form.initial["max_delivery_attempts"] == (
        conf.max_delivery_attempts
    )

    assert add(admin_client, "consumergroup", name="C", max_delivery_attempts=5).status_code == 302
    group = ConsumerGroup.objects.get(name="C")
    assert group.max_delivery_attempts == 5

    assert "max_delivery_attempts" in form_errors(
        change(admin_client, "consumergroup", group.pk, max_delivery_attempts=0)
    )
    assert (
        change(admin_client, "consumergroup", group.pk, max_delivery_attempts=7).status_code == 302
    )
    assert ConsumerGroup.objects.get(pk=group.pk).max_delivery_attempts == 7


# --- Access keys ---------------------------------------------------------------------------------


def shown_token(admin_client, response) -> str:
    """The token in the one-time message of the page the admin redirects to after an access
    key was added (showing the message uses it up)."""
    assert response.status_code == 302, form_errors(response)
    page = admin_client.get(response.url)
    shown = [m for m in map(str, page.context["messages"]) if "once only" in m]
    assert len(shown) == 1, shown
    [token] = re.findall(r"\bhm_[A-Za-z0-9_-]{20,}", shown[0])
    assert token in page.content.decode()
    return token


def test_an_access_key_made_in_the_admin_authenticates_with_the_token_shown_once(admin_client):
    response = add(
        admin_client,
        "accesskey",
        name="ops",
        is_admin="on",
        producer_groups="",
        consumer_groups="",
    )

    assert response.status_code == 302, form_errors(response)
    token = shown_token(admin_client, response)
    key = AccessKey.objects.get(name="ops")
    assert key.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token.startswith(key.token_prefix)
    assert client_for(token).get("/api/v1/topics").status_code == 200
    assert client_for(token + "x").get("/api/v1/topics").status_code == 401
    # Shown once: no page shows the token again.
    for url in ["/admin/broker/accesskey/", CHANGE.format(model="accesskey", pk=key.pk)]:
        assert token not in admin_client.get(url).content.decode()


def test_an_access_key_gets_its_groups_in_the_admin_and_they_can_change(admin_client, topic):
    producer_group_create(name="G", check_url=None)
    response = add(
        admin_client, "accesskey", name="app", producer_groups="G, G2", consumer_groups="C"
    )
    assert response.status_code == 302, form_errors(response)
    token = shown_token(admin_client, response)
    key = AccessKey.objects.get(name="app")
    assert (key.is_admin, key.producer_groups, key.consumer_groups) == (False, ["G", "G2"], ["C"])
    assert send_half(client_for(token)).status_code == 201

    response = change(
        admin_client, "accesskey", key.pk, producer_groups="G2", consumer_groups="C D"
    )

    assert response.status_code == 302, form_errors(response)
    key.refresh_from_db()
    assert (key.producer_groups, key.consumer_groups) == (["G2"], ["C", "D"])
    assert send_half(client_for(token)).status_code == 403  # no longer a producer of G


def test_the_admin_refuses_an_access_key_with_a_bad_group_name(admin_client):
    response = add(admin_client, "accesskey", name="bad", producer_groups="ok no/slash")

    assert form_errors(response)
    assert not AccessKey.objects.exists()


def test_deleting_an_access_key_in_the_admin_revokes_it(admin_client):
    response = add(admin_client, "accesskey", name="gone", is_admin="on")
    token = shown_token(admin_client, response)
    key = AccessKey.objects.get(name="gone")
    assert client_for(token).get("/api/v1/topics").status_code == 200

    admin_client.post(f"/admin/broker/accesskey/{key.pk}/delete/", {"post": "yes"})

    assert not AccessKey.objects.exists()
    assert client_for(token).get("/api/v1/topics").status_code == 401


# --- The rest is view-only ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "consumequeue",
        "message",
        "transaction",
        "resolution",
        "transactionevent",
        "checkrequest",
        "consumeroffset",
        "delivery",
        "scanlease",
        "metricwatermark",
        "metricrollup",
    ],
)
def test_stored_messages_and_derived_state_cannot_be_added_in_the_admin(admin_client, model):
    assert admin_client.get(f"/admin/broker/{model}/").status_code == 200
    assert admin_client.get(ADD.format(model=model)).status_code == 403


def test_a_message_cannot_be_changed_or_deleted_in_the_admin(admin_client, topic, owner):
    send_message(owner)
    message = Message.objects.get(topic="TranTest")

    url = CHANGE.format(model="message", pk=message.pk)
    assert admin_client.post(url, {"tags": "edited", "_save": "Save"}).status_code == 403
    delete = f"/admin/broker/message/{message.pk}/delete/"
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert Message.objects.get(pk=message.pk).tags == ""
