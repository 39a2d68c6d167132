"""README.md's settings table is the code's (RocketMQ: 'docs and code disagree' is a known pain)."""

from pathlib import Path

from django.conf import settings

from halfmoon.broker_settings import BROKER_SETTINGS, settings_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_settings_table_is_rendered_from_the_code():
    text = README.read_text()
    block = text.split("<!-- settings-table:start -->")[1].split("<!-- settings-table:end -->")[0]
    assert block.strip() == settings_table()


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
