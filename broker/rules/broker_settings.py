"""The broker's settings: name, RocketMQ name, default, unit, bounds and meaning, in one list.

``halfmoon.settings`` builds ``HALFMOON_SETTINGS`` from it, ``broker.conf`` reads them, and
docs/settings.md is rendered from it (``bin/docs``; tests/halfmoon/test_settings_doc.py keeps the
two equal), so the docs cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BrokerSetting:
    """One integer setting read from the environment variable ``name``."""

    name: str
    default: int
    rocketmq: str
    meaning: str
    minimum: int | None = None
    maximum: int | None = None
    unit: str = ""
    """The value's unit (``GET /api/v1/broker-settings``); by default from the name's suffix:
    ``_MS`` ms, ``_HOURS`` hours, ``_SIZE`` bytes. A name without one gives it."""

    def __post_init__(self) -> None:
        if not self.unit:
            suffixes = {"_MS": "ms", "_HOURS": "hours", "_SIZE": "bytes"}
            unit = next((u for s, u in suffixes.items() if self.name.endswith(s)), "")
            if not unit:
                raise ValueError(f"{self.name} needs its unit: its name does not say it.")
            object.__setattr__(self, "unit", unit)


BROKER_SETTINGS: tuple[BrokerSetting, ...] = (
    BrokerSetting(
        "HALFMOON_TRANSACTION_TIMEOUT_MS",
        6000,
        "transactionTimeOut",
        "A half message is first checked no earlier than this after it was stored (ms).",
        0,
    ),
    BrokerSetting(
        "HALFMOON_TRANSACTION_CHECK_MAX",
        15,
        "transactionCheckMax",
        "Checks delivered before a still-unresolved transaction is discarded.",
        1,
        unit="checks",
    ),
    BrokerSetting(
        "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS",
        30000,
        "transactionCheckInterval",
        "At most one check per transaction per interval (ms).",
        100,
    ),
    BrokerSetting(
        "HALFMOON_FILE_RESERVED_HOURS",
        72,
        "fileReservedTime",
        "Half messages older than this are discarded whatever their check count (hours).",
        1,
    ),
    BrokerSetting(
        "HALFMOON_OP_BATCH_INTERVAL_MS",
        3000,
        "transactionOpBatchInterval",
        "Op messages are written from the resolution journal at least this often (ms; RIP-50; beat, whole seconds).",
        10,
    ),
    BrokerSetting(
        "HALFMOON_OP_MSG_MAX_SIZE",
        4096,
        "transactionOpMsgMaxSize",
        "Largest Op message body (bytes; RIP-50); a process that buffered this much for one queue flushes it at once.",
        16,
    ),
    BrokerSetting(
        "HALFMOON_HALF_QUEUE_NUMS",
        4,
        "(RMQ_SYS_TRANS_HALF_TOPIC has 1 queue)",
        "Half queues (and Op queues) transactions are sharded over by transaction id.",
        1,
        64,
        unit="queues",
    ),
    BrokerSetting(
        "HALFMOON_MAX_MESSAGE_SIZE",
        4 * 1024 * 1024,
        "maxMessageSize",
        "Largest message body (bytes); larger answers 413.",
        1,
    ),
    BrokerSetting(
        "HALFMOON_MAX_PROPERTIES_SIZE",
        32 * 1024,
        "(32 KiB properties limit)",
        "Largest total of property keys and values (bytes, UTF-8); larger answers 413.",
        1,
    ),
    BrokerSetting(
        "HALFMOON_CHECK_SCAN_INTERVAL_MS",
        1000,
        "(scan cadence; RocketMQ scans every check interval)",
        "How often beat starts a back-check scan of the half queues (ms, whole seconds).",
        1000,
    ),
    BrokerSetting(
        "HALFMOON_CHECK_REQUEST_TIMEOUT_MS",
        5000,
        "-",
        "Connect and read timeout of one back-check HTTP request (ms).",
        100,
    ),
    BrokerSetting(
        "HALFMOON_CHECK_BATCH_SIZE",
        200,
        "-",
        "Transactions claimed per half queue per check round.",
        1,
        unit="transactions",
    ),
    BrokerSetting(
        "HALFMOON_CHECK_CONCURRENCY",
        32,
        "(checkThreadPoolMaxSize)",
        "Back-check HTTP requests in flight at once per round.",
        1,
        unit="requests",
    ),
    BrokerSetting(
        "HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS",
        1000,
        "-",
        "First retry delay of a check that could not be delivered; doubles up to the check interval (ms).",
        10,
    ),
    BrokerSetting(
        "HALFMOON_MAX_DELIVERY_ATTEMPTS",
        16,
        "maxReconsumeTimes",
        "Default max_delivery_attempts of a new consumer group; then %DLQ%{group}.",
        1,
        unit="attempts",
    ),
)


BROKER_SETTINGS += (
    BrokerSetting(
        "HALFMOON_CHECK_GROUP_MAX_IN_FLIGHT",
        16,
        "-",
        "Checks of one producer group claimed per round of a half queue (the rest wait a round).",
        1,
        unit="checks",
    ),
    BrokerSetting(
        "HALFMOON_CHECK_GROUP_MAX_PER_SECOND",
        100,
        "-",
        "Checks sent to one producer group per second, across all workers (Redis).",
        1,
        unit="checks/s",
    ),
    BrokerSetting(
        "HALFMOON_CHECK_MAX_PROCESS_TIME_MS",
        60000,
        "MAX_PROCESS_TIME_LIMIT",
        "Time budget of one scan of a half queue (ms); the rest waits for the next scan.",
        1000,
    ),
    BrokerSetting(
        "HALFMOON_LOOKUP_CACHE_MS",
        5000,
        "-",
        "How long a process caches access keys, topics, producer groups and consumer groups (ms); 0 turns it off.",
        0,
    ),
    BrokerSetting(
        "HALFMOON_ARCHIVE_SEGMENT_MS",
        600000,
        "-",
        "Length of one archived time segment of the logs (ms; must divide an hour).",
        1000,
        3600000,
    ),
    BrokerSetting(
        "HALFMOON_ARCHIVE_LAG_MS",
        60000,
        "-",
        "A segment is archived only this long after its end, when no write in flight can still land in it (ms).",
        0,
    ),
    BrokerSetting(
        "HALFMOON_ARCHIVE_INTERVAL_MS",
        60000,
        "-",
        "How often beat starts the archive export and prune (ms, whole seconds).",
        1000,
    ),
    BrokerSetting(
        "HALFMOON_VISIBILITY_SLA_MS",
        1000,
        "-",
        "The reconciliation flags a commit that took longer than this from end to visible (ms).",
        1,
    ),
    BrokerSetting(
        "HALFMOON_RECONCILE_MAX_STORED_ANOMALIES",
        10000,
        "-",
        "Anomalies of one reconciliation run kept in the database for the API and console (all are in its Parquet output).",
        1,
        unit="anomalies",
    ),
)


BROKER_SETTINGS += (
    BrokerSetting(
        "HALFMOON_BATCH_MAX_MESSAGES",
        128,
        "(batch send; RocketMQ bounds a batch by maxMessageSize only)",
        "Most items of one batch request (transactions/batch, end-batch, messages/batch); more answers 400.",
        1,
        10000,
        unit="items",
    ),
)


BROKER_SETTINGS += (
    BrokerSetting(
        "HALFMOON_ALERT_EVALUATION_INTERVAL_MS",
        15000,
        "-",
        "How often beat evaluates the alert rules and sends the notifications due (ms, whole seconds).",
        1000,
    ),
    BrokerSetting(
        "HALFMOON_ALERT_REPEAT_INTERVAL_MS",
        14400000,
        "(Alertmanager repeat_interval)",
        "A firing alert's reminder interval when its rule sets none (ms); 0: no reminders.",
        0,
    ),
    BrokerSetting(
        "HALFMOON_ALERT_NOTIFY_TIMEOUT_MS",
        5000,
        "-",
        "Connect and read timeout of one webhook notification, and of the SMTP connection of one e-mail (ms).",
        100,
    ),
    BrokerSetting(
        "HALFMOON_ALERT_NOTIFY_MAX_ATTEMPTS",
        10,
        "-",
        "Attempts to deliver a notification before it is marked failed (shown in the console, retried from there).",
        1,
        unit="attempts",
    ),
    BrokerSetting(
        "HALFMOON_ALERT_NOTIFY_BACKOFF_MS",
        5000,
        "-",
        "First retry delay of an undelivered notification; doubles up to 10 minutes (ms).",
        100,
    ),
)


BROKER_SETTINGS += (
    BrokerSetting(
        "HALFMOON_GRPC_PORT",
        8081,
        "(proxy grpcServerPort)",
        "Port of the gRPC server (RocketMQ 5's MessagingService, served to RocketMQ's own clients).",
        1,
        65535,
        unit="port",
    ),
    BrokerSetting(
        "HALFMOON_GRPC_CLIENT_EXPIRY_MS",
        120000,
        "channelExpiredTimeout",
        "A gRPC client not heard from (telemetry, heartbeat, any call) for this long is no longer live: no back-check goes to it (ms).",
        1000,
    ),
)

BROKER_SETTINGS += (
    BrokerSetting(
        "HALFMOON_TIMER_MAX_DELAY_SEC",
        259200,
        "timerMaxDelaySec",
        "A delay or timer message may be due at most this far ahead (seconds; 3 days).",
        1,
        unit="s",
    ),
)
