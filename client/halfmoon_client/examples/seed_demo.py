"""RocketMQ's transaction example (``TransactionProducer`` + ``TransactionListenerImpl`` + a
consumer of TranTest) against a running Halfmoon broker, over HTTP only::

    python -m halfmoon_client.examples.seed_demo --url http://127.0.0.1:8000 --token ADMIN_TOKEN

With an admin key it creates the topic TranTest (4 queues, or reuses it) and a producer and a
consumer group named after the run, serves back-checks on ``--check-host``, sends ten half
messages and consumes. Local transactions answer UNKNOW; a back-check answers by
``value % 3`` (0 UNKNOW, 1 COMMIT_MESSAGE, 2 ROLLBACK_MESSAGE): 1, 4, 7 are consumed, 2, 5, 8
rolled back, 0, 3, 6, 9 discarded after ``HALFMOON_TRANSACTION_CHECK_MAX`` checks.
``--app-token`` (with ``--producer-group``/``--consumer-group``) uses an application's key.
Exit status 0 only if the outcome is the example's; ``manage.py demo`` runs this same code
(README.md "The demo": the short check settings that end it in seconds).
"""

from __future__ import annotations

import argparse
import secrets
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from halfmoon_client import (
    HalfmoonAdmin,
    HalfmoonError,
    LocalTransactionState,
    Message,
    MessageView,
    SimpleConsumer,
    TransactionProducer,
)
from halfmoon_client.examples.demo_listener import DemoTransactionListener

TOPIC = "TranTest"
QUEUE_NUMS = 4
TAGS = ["TagA", "TagB", "TagC", "TagD", "TagE"]
FINAL_STATES = ("COMMITTED", "ROLLED_BACK", "DISCARDED")
DEFAULT_TIMEOUT_S = 600.0
"""Enough for RocketMQ's default check settings: 6 s + (15 + 1) x 30 s, plus a minute."""


class DemoFailed(Exception):
    """The demo could not run (broker down, an error answer) or its outcome is not the
    example's; the message says which."""


def run_suffix() -> str:
    """A name part unique to one run (``20250101120000_a1b2c3``): the demo's groups (and
    ``manage.py demo``'s access keys) are named after it."""
    return f"{time.strftime('%Y%m%d%H%M%S')}_{secrets.token_hex(3)}"


def _values(values: list[int]) -> str:
    return ", ".join(str(v) for v in sorted(values)) or "none"


def _print_line(line: str) -> None:
    print(line, flush=True)


class SeedDemo:
    """One run of the example against the broker at ``url``.

    Args:
        url: the broker's base URL, e.g. ``"http://127.0.0.1:8000"``.
        admin_token: an admin access key (creates the topic and the groups).
        token: the key that sends, answers and consumes (needs both groups); None: the admin
            key.
        producer_group, consumer_group: the groups to create (fresh names per run).
        count: half messages to send (at least 1).
        timeout_s: give up (``DemoFailed``) if not every transaction is final and consumed by
            then; long enough for the broker's check settings.
        check_host: where the producer serves back-checks (the broker must reach it).
        say: prints one line of output; called from several threads (calls are serialised).
    """

    def __init__(
        self,
        *,
        url: str,
        admin_token: str,
        token: str | None = None,
        producer_group: str,
        consumer_group: str,
        count: int = 10,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        check_host: str = "127.0.0.1",
        say: Callable[[str], None] = _print_line,
    ) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        self.url = url.rstrip("/")
        self.admin_token = admin_token
        self.token = token or admin_token
        self.producer_group = producer_group
        self.consumer_group = consumer_group
        self.count = count
        self.timeout_s = timeout_s
        self.check_host = check_host
        self._print = say
        self._out_lock = threading.Lock()

    def _say(self, line: str = "") -> None:
        with self._out_lock:
            self._print(line)

    def run(self) -> None:
        """Set up, send, answer back-checks, consume, print the summary.

        Raises:
            DemoFailed: the broker is down or answered an error, the deadline passed, or the
                outcome differs from the example's (after the summary is printed).
        """
        admin = HalfmoonAdmin(self.url, self.admin_token)
        try:
            self._run(admin)
        except HalfmoonError as exc:
            raise DemoFailed(f"The broker at {self.url} answered: {exc}") from exc
        finally:
            admin.close()

    def _setup(self, admin: HalfmoonAdmin) -> str:
        """Topic and groups over HTTP; returns the producer group's check_secret."""
        try:
            admin.health()
        except HalfmoonError as exc:
            raise DemoFailed(
                f"The broker at {self.url} is not healthy or not running ({exc}). Start the web "
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
        group = admin.create_producer_group(self.producer_group, check_url=None)
        admin.create_consumer_group(self.consumer_group)
        self._say(f"producer group {self.producer_group}, consumer group {self.consumer_group}")
        return str(group["check_secret"])

    def _run(self, admin: HalfmoonAdmin) -> None:
        check_secret = self._setup(admin)
        listener = DemoTransactionListener()

        def on_check(view: MessageView, state: LocalTransactionState) -> None:
            self._say(f"check #{view.check_times} of {view.text} -> {state.value}")

        producer = TransactionProducer(
            self.url,
            self.token,
            self.producer_group,
            listener,
            check_mode="serve",
            check_host=self.check_host,
            check_secret=check_secret,
            on_check=on_check,
        )
        consumer = SimpleConsumer(self.url, self.token, self.consumer_group, TOPIC)
        producer.start()
        try:
            admin.update_producer_group(self.producer_group, check_url=producer.check_url)
            self._say(f"producer serves back-checks at {producer.check_url}")
            started = time.monotonic()
            bodies = self._send_all(producer)
            self._say(f"waiting up to {self.timeout_s:g} s for every transaction to be final...")
            final, consumed, others = self._wait(
                producer, consumer, bodies, started + self.timeout_s
            )
            elapsed = time.monotonic() - started
        finally:
            producer.shutdown()
            consumer.close()
        self._summary(listener, bodies, final, consumed, others, elapsed)

    def _send_all(self, producer: TransactionProducer) -> dict[str, str]:
        """Send the example's messages; returns transaction id -> body."""
        bodies: dict[str, str] = {}
        for i in range(self.count):
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
            DemoFailed: the deadline passed.
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
                raise DemoFailed(
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
        elapsed: float,
    ) -> None:
        """Print the outcome by value; raise ``DemoFailed`` if it is not the example's."""
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
            "committed": [v for v in range(self.count) if v % 3 == 1],
            "rolled back": [v for v in range(self.count) if v % 3 == 2],
            "discarded": [v for v in range(self.count) if v % 3 == 0],
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
            raise DemoFailed("The outcome differs from RocketMQ's example: " + "; ".join(problems))


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of one run that ``manage.py demo`` shares: ``--url``, ``--messages``,
    ``--check-host``."""
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the broker's base URL")
    parser.add_argument("--messages", type=int, default=10, help="half messages to send")
    parser.add_argument(
        "--check-host", default="127.0.0.1", help="where the producer serves back-checks"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m halfmoon_client.examples.seed_demo``."""
    parser = argparse.ArgumentParser(
        prog="python -m halfmoon_client.examples.seed_demo",
        description=(
            "Run RocketMQ's transaction example (10 half messages to TranTest, a listener "
            "answering back-checks by value % 3, a consumer) against a running broker. Exit 0 "
            "only if 1, 4, 7 are committed and consumed, 2, 5, 8 rolled back and 0, 3, 6, 9 "
            "discarded."
        ),
    )
    add_run_arguments(parser)
    parser.add_argument(
        "--token", required=True, help="an admin access key (creates the topic and the groups)"
    )
    parser.add_argument(
        "--app-token",
        default=None,
        help="the key that sends and consumes (with both groups); default: the admin key",
    )
    parser.add_argument("--producer-group", default=None, help="default: demo_producer_<run>")
    parser.add_argument("--consumer-group", default=None, help="default: demo_consumer_<run>")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="give up (exit 1) if not every transaction is final and consumed by then; the "
        "default suits RocketMQ's default check settings",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo from the command line; returns the exit status (0: the example's outcome,
    1: anything else, with the reason on stderr)."""
    args = build_parser().parse_args(argv)
    if args.messages < 1:
        print("--messages must be at least 1.", file=sys.stderr)
        return 2
    suffix = run_suffix()
    demo = SeedDemo(
        url=args.url,
        admin_token=args.token,
        token=args.app_token,
        producer_group=args.producer_group or f"demo_producer_{suffix}",
        consumer_group=args.consumer_group or f"demo_consumer_{suffix}",
        count=args.messages,
        timeout_s=args.timeout_s,
        check_host=args.check_host,
    )
    try:
        demo.run()
    except DemoFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
