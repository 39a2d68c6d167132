"""Access keys' RocketMQ SecretKeys in the Django admin: whether a key has one is shown, the
secret only once, in the message of the action that made it; never its ciphertext."""

from __future__ import annotations

import re

import pytest
from rocketmq.v5.util.signature import Signature

from broker.models import AccessKey
from broker.services.access.secrets import access_key_secret_set, signature_authenticate
from broker.services.topology.writes import access_key_create

CHANGELIST = "/admin/broker/accesskey/"
DATE_TIME = "20240102T030405Z"


@pytest.fixture
def app(db) -> AccessKey:
    key, _ = access_key_create(name="orders-app", producer_groups=["G"])
    return key


def act(admin_client, action: str, key: AccessKey):
    response = admin_client.post(
        CHANGELIST, {"action": action, "_selected_action": [str(key.pk)]}, follow=True
    )
    assert response.status_code == 200
    return response


def secret_column(admin_client) -> list[str]:
    """The RocketMQ secret column's icons on the list page, one per key (alt True/False)."""
    page = admin_client.get(CHANGELIST).content.decode()
    return re.findall(r'<td class="field-has_rocketmq_secret"><img [^>]*alt="(True|False)"', page)


def test_the_list_shows_whether_a_key_has_a_secret(admin_client, app: AccessKey) -> None:
    access_key_create(name="zz-other")
    assert secret_column(admin_client) == ["False", "False"]

    access_key_secret_set(name=app.name)

    assert secret_column(admin_client) == ["True", "False"]


def test_the_action_shows_a_new_secret_once_and_it_signs(admin_client, app: AccessKey) -> None:
    response = act(admin_client, "rocketmq_secret_set", app)

    shown = [m for m in map(str, response.context["messages"]) if "RocketMQ SecretKey" in m]
    assert len(shown) == 1
    [secret] = re.findall(r" is (\S+) \. Copy it now", shown[0])
    header = (
        f"MQv2-HMAC-SHA1 Credential={app.name}, SignedHeaders=x-mq-date-time, "
        f"Signature={Signature.sign(secret, DATE_TIME)}"
    )
    key = signature_authenticate(authorization=header, date_time=DATE_TIME)
    assert key is not None and key.name == app.name
    stored = AccessKey.objects.get(pk=app.pk).secret_encrypted
    for url in [CHANGELIST, f"{CHANGELIST}{app.pk}/change/"]:
        page = admin_client.get(url).content.decode()
        assert secret not in page
        assert stored not in page


def test_the_change_page_never_shows_the_ciphertext(admin_client, app: AccessKey) -> None:
    access_key_secret_set(name=app.name)
    stored = AccessKey.objects.get(pk=app.pk).secret_encrypted

    page = admin_client.get(f"{CHANGELIST}{app.pk}/change/")

    assert "secret_encrypted" not in page.context["adminform"].form.fields
    assert stored not in page.content.decode()
    assert "RocketMQ secret" in page.content.decode()


def test_the_clear_action_removes_the_secret(admin_client, app: AccessKey) -> None:
    access_key_secret_set(name=app.name)

    response = act(admin_client, "rocketmq_secret_clear", app)

    assert AccessKey.objects.get(pk=app.pk).secret_encrypted == ""
    assert any("No RocketMQ SecretKey any more" in str(m) for m in response.context["messages"])
