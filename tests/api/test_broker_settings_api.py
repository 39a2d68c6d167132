"""GET /api/v1/broker-settings (admin key): every broker setting with the value the server runs
with, its unit, default, bounds and source, and the derived values (docs/api.md)."""

from __future__ import annotations

import pytest

from broker.rules.anomalies import settle_ms
from broker.rules.broker_settings import BROKER_SETTINGS
from broker.selectors.reconciliation import reconciliation_params
from tests.api_helpers import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/broker-settings"
SETTING_KEYS = {
    "name", "value", "unit", "default", "source", "minimum", "maximum", "rocketmq", "meaning",
}  # fmt: skip


def by_name(answer: dict) -> dict[str, dict]:
    return {s["name"]: s for s in answer["settings"] + answer["derived"]}


def test_an_admin_key_reads_the_values_the_server_runs_with(owner, broker_settings):
    broker_settings.update(
        {
            "HALFMOON_TRANSACTION_TIMEOUT_MS": 1000,
            "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": 1000,
            "HALFMOON_TRANSACTION_CHECK_MAX": 3,
            "HALFMOON_ARCHIVE_SEGMENT_MS": 5000,
            "HALFMOON_ARCHIVE_LAG_MS": 1000,
            "HALFMOON_ARCHIVE_INTERVAL_MS": 2500,
            "HALFMOON_CHECK_SCAN_INTERVAL_MS": 1000,
        }
    )

    response = owner.get(URL)

    assert response.status_code == 200, response.content
    answer = response.json()
    assert set(answer) == {"settings", "derived"}
    assert [s["name"] for s in answer["settings"]] == [s.name for s in BROKER_SETTINGS]
    assert all(set(s) == SETTING_KEYS for s in answer["settings"])
    values = by_name(answer)
    assert values["HALFMOON_TRANSACTION_TIMEOUT_MS"] == {
        "name": "HALFMOON_TRANSACTION_TIMEOUT_MS",
        "value": 1000,
        "unit": "ms",
        "default": 6000,
        "source": "setting",
        "minimum": 0,
        "maximum": None,
        "rocketmq": "transactionTimeOut",
        "meaning": "A half message is first checked no earlier than this after it was stored (ms).",
    }
    assert values["HALFMOON_TRANSACTION_CHECK_MAX"]["value"] == 3
    assert values["HALFMOON_TRANSACTION_CHECK_MAX"]["unit"] == "checks"
    assert values["HALFMOON_ARCHIVE_SEGMENT_MS"]["value"] == 5000
    assert values["HALFMOON_ARCHIVE_SEGMENT_MS"]["maximum"] == 3_600_000
    assert values["HALFMOON_FILE_RESERVED_HOURS"]["unit"] == "hours"
    assert values["HALFMOON_FILE_RESERVED_HOURS"]["source"] == "default"
    assert values["HALFMOON_CHECK_BATCH_SIZE"]["unit"] == "transactions"  # not bytes
    # Derived: 1000 + (3 + 1) x 1000 + 2 x 1000 ms, as the reconciliation computes it.
    assert values["reconciliation_settle_ms"] == {
        "name": "reconciliation_settle_ms",
        "value": 7000,
        "unit": "ms",
        "meaning": values["reconciliation_settle_ms"]["meaning"],
    }
    assert values["reconciliation_settle_ms"]["value"] == settle_ms(
        reconciliation_params(since_ms=0, until_ms=0, as_of_ms=0)
    )
    assert values["archive_interval_s"]["value"] == 2  # beat's whole seconds


def test_the_answer_follows_a_setting_changed_while_the_server_runs(owner, broker_settings):
    before = by_name(owner.get(URL).json())["HALFMOON_ARCHIVE_SEGMENT_MS"]
    broker_settings["HALFMOON_ARCHIVE_SEGMENT_MS"] = 60000

    after = by_name(owner.get(URL).json())["HALFMOON_ARCHIVE_SEGMENT_MS"]

    assert (before["value"], before["source"]) == (600000, "default")
    assert (after["value"], after["source"]) == (60000, "setting")


def test_every_setting_is_an_integer_and_no_secret_appears(owner, settings):
    text = owner.get(URL).content.decode()
    answer = by_name(owner.get(URL).json())

    assert all(isinstance(s["value"], int) for s in answer.values())
    for secret in (settings.SECRET_KEY, settings.DATABASES["default"]["PASSWORD"]):
        assert not secret or secret not in text
    assert "SECRET" not in text and "PASSWORD" not in text and "DATABASE_URL" not in text


@pytest.mark.parametrize("key", ["producer", "consumer", "outsider"])
def test_a_key_that_is_not_admin_is_refused(request, key):
    client = request.getfixturevalue(key)

    error = assert_error(client.get(URL), 403, "permission_denied")

    assert error["message"] == "This operation needs an admin access key."


def test_without_a_key_it_is_a_401(anonymous):
    response = anonymous.get(URL)

    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="halfmoon"'


def test_the_openapi_document_describes_it(anonymous):
    document = anonymous.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    operation = document.json()["paths"][URL]["get"]
    schemas = document.json()["components"]["schemas"]

    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/BrokerSettingsOut"
    }
    assert {"401", "403", "406", "503"} <= set(operation["responses"])
    assert set(schemas["EffectiveSettingOut"]["properties"]) == SETTING_KEYS
