"""``GET /api/v1/broker-settings``: the broker settings in effect
(``broker.selectors.broker_settings``)."""

from __future__ import annotations

from rest_framework import serializers

from broker.rules.check_explanation import SOURCE_DEFAULT, SOURCE_SETTING


class EffectiveSettingOutSerializer(serializers.Serializer):
    """One broker setting as this broker runs with it (``EffectiveSetting``)."""

    name = serializers.CharField(
        help_text="The environment variable, e.g. HALFMOON_ARCHIVE_SEGMENT_MS"
    )
    value = serializers.IntegerField(help_text="The value the broker runs with, in `unit`")
    unit = serializers.CharField(
        help_text="ms, s, hours, bytes, or what the value counts (checks, queues, ...)"
    )
    default = serializers.IntegerField(help_text="The value when the environment does not set it")
    source = serializers.ChoiceField(
        choices=[SOURCE_DEFAULT, SOURCE_SETTING],
        help_text="`default` when `value` is the default, else `setting` (set in the broker's "
        "environment)",
    )
    minimum = serializers.IntegerField(allow_null=True, help_text="The lowest value accepted")
    maximum = serializers.IntegerField(allow_null=True, help_text="The highest value accepted")
    rocketmq = serializers.CharField(
        help_text="RocketMQ's name of the setting, a note on its counterpart in parentheses, "
        "or - for none"
    )
    meaning = serializers.CharField()


class DerivedSettingOutSerializer(serializers.Serializer):
    """A value the broker derives from its settings (``DerivedSetting``)."""

    name = serializers.CharField(help_text="e.g. reconciliation_settle_ms")
    value = serializers.IntegerField(help_text="In `unit`")
    unit = serializers.CharField()
    meaning = serializers.CharField()


class BrokerSettingsOutSerializer(serializers.Serializer):
    """Every broker setting (README's table, in its order), then the values derived from them."""

    settings = EffectiveSettingOutSerializer(many=True)
    derived = DerivedSettingOutSerializer(many=True)
