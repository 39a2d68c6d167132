"""``manage.py demo [--url URL] [--messages 10] [--timeout-s S]``: the RocketMQ transaction
example (TransactionProducer + TransactionListenerImpl + a consumer of TranTest) against a
running broker (web server, Celery worker and beat).

The command uses the database only to make itself access keys; it creates the topic and its
groups, sends, answers back-checks and consumes through ``broker.client`` over HTTP. The
listener is the example's: ``execute_local_transaction`` records ``value`` (0, 1, 2, ...) and
answers UNKNOW; a back-check answers by ``value % 3``: 0 UNKNOW, 1 COMMIT_MESSAGE,
2 ROLLBACK_MESSAGE. So 1, 4, 7 are committed and consumed, 2, 5, 8 rolled back, and 0, 3, 6,
9 discarded after ``HALFMOON_TRANSACTION_CHECK_MAX`` checks.

Start the broker with short check settings to see it end in seconds::

    HALFMOON_TRANSACTION_TIMEOUT_MS=1000 HALFMOON_TRANSACTION_CHECK_INTERVAL_MS=1000 \\
    HALFMOON_TRANSACTION_CHECK_MAX=3 ...

Exit status 0 only if the outcome is the example's.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import defaultdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from broker.client import (
    HalfmoonAdmin,
    HalfmoonError,
    LocalTransactionState,
    Message,
    MessageView,
    SimpleConsumer,
    TransactionListener,
    TransactionProducer,
)
from broker.conf import conf
from broker.models import AccessKey
from broker.services.admin import access_key_create

TOPIC = "TranTest"
QUEUE_NUMS = 4
TAGS = ["TagA", "TagB", "TagC", "TagD", "TagE"]
FINAL_STATES = ("COMMITTED", "ROLLED_BACK", "DISCARDED")
STATUS_ANSWERS = {
    0: LocalTransactionState.UNKNOW,
    1: LocalTransactionState.COMMIT_MESSAGE,
    2: LocalTransactionState.ROLLBACK_MESSAGE,
}


class DemoTransactionListener(TransactionListener):
    """RocketMQ's ``TransactionListenerImpl``: an AtomicInteger hands out values; the status
    ``value % 3`` decides the back-check's answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next_value = 0
        self.local_trans: dict[str, int] = {}  # transaction id -> value

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self._lock:  # transactionIndex.getAndIncrement()
            value = self._next_value
            self._next_value += 1
            self.local_trans[str(msg.transaction_id)] = value
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg_view: MessageView) -> LocalTransactionState:
        with self._lock:
            value = self.local_trans.get(str(msg_view.transaction_id))
        if value is None:
            return LocalTransactionState.COMMIT_MESSAGE
        return STATUS_ANSWERS[value % 3]


def _values(values: list[int]) -> str:
    return ", ".join(str(v) for v in sorted(values)) or "none"


def default_timeout_s() -> float:
    """How long the UNKNOW transactions take to be discarded with this environment's settings:
    the first check after the transaction timeout, then one check per interval up to the check
    max, and the discard one interval later; plus a minute for scans and the consumer."""
    timeout = conf.transaction_timeout_ms
    interval = conf.transaction_check_interval_ms
    check_max = conf.transaction_check_max
    return (timeout + (check_max + 1) * interval) / 1000 + 60


class Command(BaseCommand):
    help = (
        "Run RocketMQ's transaction example (10 half messages to TranTest, a listener answering "
        "back-checks by value % 3, a consumer) against a running broker. Exit 0 only if 1, 4, 7 "
        "are committed and consumed, 2, 5, 8 rolled back and 0, 3, 6, 9 discarded."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the broker's base URL")
        parser.add_argument("--messages", type=int, default=10, help="half messages to send")
        parser.add_argument(
            "--timeout-s",
            type=float,
            default=None,
            help="give up (exit 1) if not every transaction is final and consumed by then; "
            "default: long enough for the check settings in this environment (the broker's "
            "must match): timeout + (check max + 1) x check interval + 60 s",
        )
        parser.add_argument(
            "--check-host", default="127.0.0.1", help="where the producer serves back-checks"
        )

    # output -------------------------------------------------------------------------------------

    def _say(self, line: str = "") -> None:
        with self._out_lock:
            self.stdout.write(line)
            self.stdout.flush()

    # main ---------------------------------------------------------------------------------------

    def handle(self, *args: Any, **options: Any) -> None:
        self._out_lock = threading.Lock()
        url: str = options["url"].rstrip("/")
        count: int = options["messages"]
        timeout_s: float = options["timeout_s"] or default_timeout_s()
        if count < 1:
            raise CommandError("--messages must be at least 1.")

        suffix = f"{time.strftime('%Y%m%d%H%M%S')}_{secrets.token_hex(3)}"
        producer_group = f"demo_producer_{suffix}"
        consumer_group = f"demo_consumer_{suffix}"

        # Setup: the only database writes. Everything else goes over HTTP.
        _, admin_token = access_key_create(name=f"demo-admin-{suffix}", is_admin=True)
        _, app_token = access_key_create(
            name=f"demo-app-{suffix}",
            producer_groups=[producer_group],
            consumer_groups=[consumer_group],
        )

        admin = HalfmoonAdmin(url, admin_token)
        try:
            self._run(
                admin, url, app_token, producer_group, consumer_group, count, timeout_s, options
            )
        except HalfmoonError as exc:
            raise CommandError(f"The broker at {url} answered: {exc}") from exc
        finally:
            admin.close()
            # The tokens die with this run; so do their keys.
            AccessKey.objects.filter(
                name__in=[f"demo-admin-{suffix}", f"demo-app-{suffix}"]
            ).delete()

    def _setup(
        self, admin: HalfmoonAdmin, url: str, producer_group: str, consumer_group: str
    ) -> str:
        """Topic and groups over HTTP; returns the producer group's check_secret."""
        try:
            admin.health()
        except HalfmoonError as exc:
            raise CommandError(
                f"The broker at {url} is not healthy or not running ({exc}). Start the web "
                "server, a Celery worker and beat first."
            ) from exc
        try:
            admin.create_topic(TOPIC, QUEUE_NUMS)
            self._say(f"created topic {TOPIC} with {QUEUE_NUMS} queues")
        except HalfmoonError as exc:
            if exc.code != "topic_exists":
                raise
            topic = admin.get_topic(TOPIC)
            self._say(f"reusing topic {TOPIC} ({topic['queue_nums']} queues)")
        group = admin.create_producer_group(producer_group, check_url=None)
        admin.create_consumer_group(consumer_group)
        self._say(f"producer group {producer_group}, consumer group {consumer_group}")
        return str(group["check_secret"])

    def _run(
        self,
        admin: HalfmoonAdmin,
        url: str,
        token: str,
        producer_group: str,
        consumer_group: str,
        count: int,
        timeout_s: float,
        options: dict[str, Any],
    ) -> None:
        check_secret = self._setup(admin, url, producer_group, consumer_group)
        listener = DemoTransactionListener()

        def on_check(view: MessageView, state: LocalTransactionState) -> None:
            self._say(f"check #{view.check_times} of {view.text} -> {state.value}")

        producer = TransactionProducer(
            url,
            token,
            producer_group,
            listener,
            check_mode="serve",
            check_host=options["check_host"],
            check_secret=check_secret,
            on_check=on_check,
        )
        consumer = SimpleConsumer(url, token, consumer_group, TOPIC)
        producer.start()
        try:
            admin.update_producer_group(producer_group, check_url=producer.check_url)
            self._say(f"producer serves back-checks at {producer.check_url}")
            started = time.monotonic()
            bodies = self._send_all(producer, count)
            self._say(f"waiting up to {timeout_s:g} s for every transaction to be final...")
            final, consumed, others = self._wait(producer, consumer, bodies, started + timeout_s)
            elapsed = time.monotonic() - started
        finally:
            producer.shutdown()
            consumer.close()
        self._summary(listener, bodies, final, consumed, others, count, elapsed)

    def _send_all(self, producer: TransactionProducer, count: int) -> dict[str, str]:
        """Send the example's messages; returns transaction id -> body."""
        bodies: dict[str, str] = {}
        for i in range(count):
            msg = Message(TOPIC, f"Hello RocketMQ {i}", tags=TAGS[i % len(TAGS)], keys=f"KEY{i}")
            result = producer.send_message_in_transaction(msg, None)
            bodies[result.transaction_id] = str(msg.body)
            self._say(
                f"send {msg.body!r} tags={msg.tags} keys={msg.keys}: {result.send_status} "
                f"transaction_id={result.transaction_id} "
                f"half_queue_offset={result.half_queue_offset} "
                f"local={result.local_transaction_state.value} state={result.state}"
            )
            time.sleep(0.01)  # Thread.sleep(10) in the example
        return bodies

    def _wait(
        self,
        producer: TransactionProducer,
        consumer: SimpleConsumer,
        bodies: dict[str, str],
        deadline: float,
    ) -> tuple[dict[str, dict[str, Any]], list[MessageView], int]:
        """Poll transactions and consume until all are final and every committed message was
        received and acked. Returns (final transactions, our consumed messages, others acked).

        Raises:
            CommandError: the deadline passed.
        """
        final: dict[str, dict[str, Any]] = {}
        consumed: list[MessageView] = []
        others = 0
        while True:
            for transaction_id in [t for t in bodies if t not in final]:
                info = producer.get_transaction(transaction_id)
                if info["state"] in FINAL_STATES:
                    final[transaction_id] = info
                    self._say(
                        f"transaction {bodies[transaction_id]}: {info['state']} "
                        f"(resolved_by={info['resolved_by']}, check_times={info['check_times']})"
                    )
            remaining = deadline - time.monotonic()
            wait_ms = int(max(0, min(1000, remaining * 1000)))
            received = consumer.receive(
                max_messages=32, invisible_duration_ms=30_000, wait_ms=wait_ms
            )
            for view in received:
                if view.msg_id in bodies:
                    consumed.append(view)
                    self._say(
                        f"consumed {view.text} (msg_id={view.msg_id} tags={view.tags} "
                        f"keys={view.keys} queue={view.queue_id} offset={view.queue_offset} "
                        f"attempt={view.delivery_attempt})"
                    )
                else:
                    others += 1
            if received:
                acked, failed = consumer.ack(received)
                if failed:
                    self._say(f"ack: {acked} acked, {len(failed)} failed: {failed}")
            committed = {t for t, info in final.items() if info["state"] == "COMMITTED"}
            if len(final) == len(bodies) and committed <= {v.msg_id for v in consumed}:
                return final, consumed, others
            if time.monotonic() >= deadline:
                pending = sorted(bodies[t] for t in bodies if t not in final)
                missing = sorted(bodies[t] for t in committed - {v.msg_id for v in consumed})
                raise CommandError(
                    f"Timed out: still PREPARED: {pending or 'none'}; committed but not consumed: "
                    f"{missing or 'none'}. Are a Celery worker and beat running, with short "
                    "check settings (HALFMOON_TRANSACTION_TIMEOUT_MS, "
                    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS, HALFMOON_TRANSACTION_CHECK_MAX)?"
                )

    def _summary(
        self,
        listener: DemoTransactionListener,
        bodies: dict[str, str],
        final: dict[str, dict[str, Any]],
        consumed: list[MessageView],
        others: int,
        count: int,
        elapsed: float,
    ) -> None:
        value_of = {t: listener.local_trans[t] for t in bodies}
        by_state: dict[str, list[int]] = defaultdict(list)
        self._say()
        self._say(f"Summary ({len(bodies)} transactions, {elapsed:.1f} s):")
        for transaction_id in sorted(bodies, key=value_of.__getitem__):
            info = final[transaction_id]
            by_state[info["state"]].append(value_of[transaction_id])
            self._say(
                f"  {bodies[transaction_id]:<20} {info['state']:<12} "
                f"check_times={info['check_times']} resolved_by={info['resolved_by']}"
            )
        checks = {value_of[t]: final[t]["check_times"] for t in bodies}
        for label, state in (("Committed", "COMMITTED"), ("Rolled back", "ROLLED_BACK")):
            values = sorted(by_state[state])
            times = ", ".join(str(checks[v]) for v in values)
            self._say(f"{label}: {_values(values)} (check times {times or 'none'})")
        discarded_by_checks: dict[int, list[int]] = defaultdict(list)
        for value in by_state["DISCARDED"]:
            discarded_by_checks[checks[value]].append(value)
        if not discarded_by_checks:
            self._say("Discarded: none")
        for times, values in sorted(discarded_by_checks.items()):
            self._say(f"Discarded after {times} checks: {_values(values)}")
        if others:
            self._say(f"(also acked {others} message(s) of {TOPIC} sent before this run)")

        consumed_values = sorted(value_of[v.msg_id] for v in consumed)
        expected = {
            "committed": [v for v in range(count) if v % 3 == 1],
            "rolled back": [v for v in range(count) if v % 3 == 2],
            "discarded": [v for v in range(count) if v % 3 == 0],
        }
        actual = {
            "committed": sorted(by_state["COMMITTED"]),
            "rolled back": sorted(by_state["ROLLED_BACK"]),
            "discarded": sorted(by_state["DISCARDED"]),
        }
        problems = [
            f"{name}: expected {_values(expected[name])}, got {_values(actual[name])}"
            for name in expected
            if expected[name] != actual[name]
        ]
        if consumed_values != expected["committed"]:
            problems.append(
                f"consumed: expected {_values(expected['committed'])}, "
                f"got {_values(consumed_values)}"
            )
        self._say(
            "Outcome matches the example."
            if not problems
            else "Outcome differs: " + "; ".join(problems)
        )
        self._say()
        self._say("Consumed:")
        for view in sorted(consumed, key=lambda v: value_of[v.msg_id]):
            self._say(view.text)
        if problems:
            raise CommandError(
                "The outcome differs from RocketMQ's example: " + "; ".join(problems)
            )
