"""docs/settings.md is the code's (RocketMQ: 'docs and code disagree' is a known pain): it is
rendered from the settings' definitions by ``halfmoon.settings_doc`` (``bin/docs``)."""

from pathlib import Path

from django.conf import settings

from broker.rules.broker_settings import BROKER_SETTINGS
from halfmoon.settings_doc import ENTRIES, ROOT, env_definitions, render

SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_settings_doc_is_rendered_from_the_code():
    assert SETTINGS_DOC.read_text(encoding="utf-8") == render(), (
        "docs/settings.md is stale: run bin/docs"
    )


def test_every_env_setting_has_an_entry_and_every_entry_a_setting():
    assert set(env_definitions()) == set(ENTRIES)


def test_definitions_are_found_with_their_defaults_and_bounds():
    found = env_definitions()
    assert found["HALFMOON_DB_POOL_MAX"].default == "20"
    assert found["HALFMOON_DB_CONNECT_TIMEOUT"].bounds == ">= 2"
    assert found["HALFMOON_PORT"].bounds == "1..65535"
    assert found["DJANGO_DEBUG"].default == "off"
    # Resolved through an import (halfmoon.embedded) and an f-string of another setting.
    assert found["HALFMOON_EMBEDDED_POSTGRES_PORT"].default == "25432"
    assert found["DATABASE_URL"].default == "`postgres://postgres@127.0.0.1:25432/halfmoon`"
    assert found["HALFMOON_CONSOLE_URL"].default == "`http://127.0.0.1:8000`"
    assert all((ROOT / d.where).is_file() for d in found.values())


def test_table_rows_are_short():
    rows = [line for line in render().splitlines() if line.startswith("| `")]
    assert len(rows) == len(ENTRIES) + len(BROKER_SETTINGS)
    assert max(len(row) for row in rows) <= 260


def test_every_broker_setting_is_read_into_halfmoon_settings():
    assert set(settings.HALFMOON_SETTINGS) == {s.name for s in BROKER_SETTINGS}


def test_contract_defaults_keep_rocketmq_values():
    defaults = {s.name: s.default for s in BROKER_SETTINGS}
    assert defaults["HALFMOON_TRANSACTION_TIMEOUT_MS"] == 6000
    assert defaults["HALFMOON_TRANSACTION_CHECK_MAX"] == 15
    assert defaults["HALFMOON_TRANSACTION_CHECK_INTERVAL_MS"] == 30000
    assert defaults["HALFMOON_FILE_RESERVED_HOURS"] == 72
    assert defaults["HALFMOON_OP_BATCH_INTERVAL_MS"] == 3000
    assert defaults["HALFMOON_OP_MSG_MAX_SIZE"] == 4096


def test_every_broker_setting_is_a_typed_attribute_of_conf():
    from broker.conf import BrokerConf, conf

    assert BrokerConf.env_names() == {s.name for s in BROKER_SETTINGS}
    for s in BROKER_SETTINGS:
        attr = s.name.removeprefix("HALFMOON_").lower()
        assert getattr(conf, attr) == settings.HALFMOON_SETTINGS[s.name]
