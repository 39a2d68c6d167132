"""The broker settings in effect in this process (``GET /api/v1/broker-settings``): every
setting of ``broker.rules.broker_settings.BROKER_SETTINGS`` with its value as ``broker.conf`` reads
it now, its unit, default, bounds and source, and the values derived from them that an operator
or a client waits on (the reconciliation's settle time, the beat periods). Broker settings are
integers: no secret (``SECRET_KEY``, database and Redis URLs, SMTP password) is among them."""

from __future__ import annotations

from dataclasses import dataclass

from broker.conf import conf
from broker.rules.broker_settings import BROKER_SETTINGS
from broker.rules.check_explanation import source_of
from broker.selectors.reconciliation import reconciliation_settle_ms


@dataclass(frozen=True)
class EffectiveSetting:
    """One broker setting: its environment variable ``name``, the ``value`` this process runs
    with (in ``unit``), its ``default`` and bounds, its ``source`` (``default`` when the value
    is the default, else ``setting``), RocketMQ's name for it and its meaning."""

    name: str
    value: int
    unit: str
    default: int
    source: str
    minimum: int | None
    maximum: int | None
    rocketmq: str
    meaning: str


@dataclass(frozen=True)
class DerivedSetting:
    """A value the broker computes from its settings (``name`` in lower case, unit-suffixed)."""

    name: str
    value: int
    unit: str
    meaning: str


@dataclass(frozen=True)
class BrokerSettings:
    """Every broker setting in ``BROKER_SETTINGS``' order, then the derived values."""

    settings: list[EffectiveSetting]
    derived: list[DerivedSetting]


def _conf_value(name: str) -> int:
    """``HALFMOON_X_MS``'s value through ``broker.conf`` (``conf.x_ms``)."""
    return getattr(conf, name.removeprefix("HALFMOON_").lower())


def broker_settings_effective() -> BrokerSettings:
    """The broker settings this process runs with, and what it derives from them (reads
    ``settings.HALFMOON_SETTINGS`` at call time, so an override is seen at once)."""
    effective = []
    for spec in BROKER_SETTINGS:
        value = _conf_value(spec.name)
        effective.append(
            EffectiveSetting(
                name=spec.name,
                value=value,
                unit=spec.unit,
                default=spec.default,
                source=source_of(value, spec.default),
                minimum=spec.minimum,
                maximum=spec.maximum,
                rocketmq=spec.rocketmq,
                meaning=spec.meaning,
            )
        )
    derived = [
        DerivedSetting(
            "reconciliation_settle_ms",
            reconciliation_settle_ms(),
            "ms",
            "How long after its half message a transaction is settled: a reconciliation "
            "window ends this long before the archive's watermark (docs/reconciliation.md).",
        ),
        DerivedSetting(
            "check_scan_interval_s",
            conf.check_scan_interval_s,
            "s",
            "Beat period of the back-check scan (HALFMOON_CHECK_SCAN_INTERVAL_MS in whole "
            "seconds, at least 1).",
        ),
        DerivedSetting(
            "op_batch_interval_s",
            conf.op_batch_interval_s,
            "s",
            "Beat period of the Op flush (HALFMOON_OP_BATCH_INTERVAL_MS rounded to whole "
            "seconds, at least 1).",
        ),
        DerivedSetting(
            "archive_interval_s",
            conf.archive_interval_s,
            "s",
            "Beat period of the archive export (HALFMOON_ARCHIVE_INTERVAL_MS in whole seconds, "
            "at least 1).",
        ),
        DerivedSetting(
            "alert_evaluation_interval_s",
            conf.alert_evaluation_interval_s,
            "s",
            "Beat period of the alert evaluation (HALFMOON_ALERT_EVALUATION_INTERVAL_MS in "
            "whole seconds, at least 1).",
        ),
    ]
    return BrokerSettings(settings=effective, derived=derived)
