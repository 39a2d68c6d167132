"""The broker's settings as typed attributes: ``conf.transaction_check_max`` reads
``settings.HALFMOON_SETTINGS["HALFMOON_TRANSACTION_CHECK_MAX"]``.

Each attribute is read at call time, so tests can change a value with pytest-django's
``settings`` fixture (``tests/conftest.py: broker_settings``) or ``override_settings``. The
list of settings, their bounds and meanings is ``broker.rules.broker_settings.BROKER_SETTINGS``; a
test keeps the attributes here equal to it, so a misspelt setting is an ``AttributeError`` at
import or lint time, never a ``KeyError`` in a running scan.
"""

from __future__ import annotations

from typing import overload

from django.conf import settings


class _BrokerSetting:
    """A read-only attribute reading ``HALFMOON_<ATTRIBUTE NAME IN UPPER CASE>`` (an int)."""

    env_name: str

    def __set_name__(self, owner: type, attr: str) -> None:
        self.env_name = f"HALFMOON_{attr.upper()}"

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _BrokerSetting: ...
    @overload
    def __get__(self, obj: BrokerConf, objtype: type | None = None) -> int: ...
    def __get__(self, obj: BrokerConf | None, objtype: type | None = None) -> int | _BrokerSetting:
        if obj is None:
            return self
        return settings.HALFMOON_SETTINGS[self.env_name]


class BrokerConf:
    """Every broker setting, by its name without ``HALFMOON_`` in lower case (ints; the unit is
    in the name: ``_ms`` milliseconds, ``_hours``, ``_size`` bytes). Meanings, RocketMQ names
    and defaults: ``broker.rules.broker_settings.BROKER_SETTINGS`` and docs/settings.md."""

    transaction_timeout_ms = _BrokerSetting()
    transaction_check_max = _BrokerSetting()
    transaction_check_interval_ms = _BrokerSetting()
    file_reserved_hours = _BrokerSetting()
    op_batch_interval_ms = _BrokerSetting()
    op_msg_max_size = _BrokerSetting()
    half_queue_nums = _BrokerSetting()
    max_message_size = _BrokerSetting()
    max_properties_size = _BrokerSetting()
    check_scan_interval_ms = _BrokerSetting()
    check_request_timeout_ms = _BrokerSetting()
    check_batch_size = _BrokerSetting()
    check_concurrency = _BrokerSetting()
    check_undelivered_backoff_ms = _BrokerSetting()
    max_delivery_attempts = _BrokerSetting()
    check_group_max_in_flight = _BrokerSetting()
    check_group_max_per_second = _BrokerSetting()
    check_max_process_time_ms = _BrokerSetting()
    lookup_cache_ms = _BrokerSetting()
    archive_segment_ms = _BrokerSetting()
    archive_lag_ms = _BrokerSetting()
    archive_interval_ms = _BrokerSetting()
    visibility_sla_ms = _BrokerSetting()
    reconcile_max_stored_anomalies = _BrokerSetting()
    batch_max_messages = _BrokerSetting()
    alert_evaluation_interval_ms = _BrokerSetting()
    alert_repeat_interval_ms = _BrokerSetting()
    alert_notify_timeout_ms = _BrokerSetting()
    alert_notify_max_attempts = _BrokerSetting()
    alert_notify_backoff_ms = _BrokerSetting()
    grpc_port = _BrokerSetting()
    grpc_client_expiry_ms = _BrokerSetting()
    timer_max_delay_sec = _BrokerSetting()

    @classmethod
    def env_names(cls) -> set[str]:
        """The environment variable of every attribute (``HALFMOON_...``)."""
        return {v.env_name for v in vars(cls).values() if isinstance(v, _BrokerSetting)}

    @property
    def check_scan_interval_s(self) -> int:
        """The back-check scan's beat period in whole seconds (django-celery-beat intervals
        are whole seconds; at least 1)."""
        return max(1, self.check_scan_interval_ms // 1000)

    @property
    def op_batch_interval_s(self) -> int:
        """The Op flush's beat period in whole seconds (RIP-50 transactionOpBatchInterval,
        rounded; at least 1)."""
        return max(1, round(self.op_batch_interval_ms / 1000))

    @property
    def archive_interval_s(self) -> int:
        """The archive export's beat period in whole seconds (at least 1)."""
        return max(1, self.archive_interval_ms // 1000)

    @property
    def alert_evaluation_interval_s(self) -> int:
        """The alert evaluation's beat period in whole seconds (at least 1)."""
        return max(1, self.alert_evaluation_interval_ms // 1000)

    @property
    def file_reserved_ms(self) -> int:
        """HALFMOON_FILE_RESERVED_HOURS in ms (RocketMQ fileReservedTime)."""
        return self.file_reserved_hours * 3_600_000


conf = BrokerConf()
