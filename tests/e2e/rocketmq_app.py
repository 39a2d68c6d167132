"""RocketMQ's official Python client (``rocketmq-python-client``, unchanged) in the roles the
end-to-end tests run as subprocesses of their own, so that each can be killed or stopped alone:

    python -m tests.e2e.rocketmq_app producer --topic T [--send N] [--end commit|rollback|none]
        [--check commit|rollback|unknown|hang|by-value] [--normal] [--wait-go] [--stay]
        [--tags A,B,C] [--properties JSON-LIST] [--delay-ms N [--recall | --recall-late]]
        [--message-groups G1,G2]
    python -m tests.e2e.rocketmq_app simple --group G --topic T --count N [--timeout-s S]
        [--tag-filter EXPR | --sql-filter EXPR] [--idle-s S]
    python -m tests.e2e.rocketmq_app push --group G --topic T --result success|failure
        [--fail-body BODY --fail-times N]

The broker and the credentials come from the environment: ``ROCKETMQ_ENDPOINT`` (``host:port`` of a
Halfmoon gRPC server), ``ROCKETMQ_ACCESS_KEY`` (an access key's name), ``ROCKETMQ_SECRET_KEY`` (its
SecretKey), ``ROCKETMQ_REQUEST_TIMEOUT_S`` (the client's request timeout, default 3). Each role
writes one JSON object per line on stdout (``{"event": ...}``) and exits when its work is done,
or on SIGTERM once its client is shut down (NotifyClientTermination). The client's own log is
``$HOME/logs/rocketmq_python/rocketmq_client.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType

STOP = threading.Event()
"""Set by SIGTERM: the role shuts its client down and exits."""

ANSWERS = {
    "commit": TransactionResolution.COMMIT,
    "rollback": TransactionResolution.ROLLBACK,
    "unknown": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
}


def emit(event: str, **fields: Any) -> None:
    """Write ``{"event": event, **fields}`` as one line on stdout, flushed."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def configuration() -> ClientConfiguration:
    """The client configuration from ``ROCKETMQ_ENDPOINT``, ``ROCKETMQ_ACCESS_KEY``, ``ROCKETMQ_SECRET_KEY``
    and ``ROCKETMQ_REQUEST_TIMEOUT_S``."""
    credentials = Credentials(os.environ["ROCKETMQ_ACCESS_KEY"], os.environ["ROCKETMQ_SECRET_KEY"])
    timeout_s = int(os.environ.get("ROCKETMQ_REQUEST_TIMEOUT_S", "3"))
    return ClientConfiguration(
        os.environ["ROCKETMQ_ENDPOINT"], credentials, request_timeout=timeout_s
    )


class Checker(TransactionChecker):
    """Answers each back-check as ``--check`` says: ``by-value`` is the seed's rule on the
    body's last number (0 -> unknown, 1 -> commit, 2 -> rollback, by value % 3); ``hang``
    never answers."""

    def __init__(self, how: str) -> None:
        self.how = how

    def check(self, message: Message) -> TransactionResolution:
        body = message.body.decode()
        answer = self.how
        if answer == "by-value":
            answer = ("unknown", "commit", "rollback")[int(body.rsplit(" ", 1)[1]) % 3]
        emit("check", message_id=message.message_id, body=body, answer=answer)
        if answer == "hang":
            threading.Event().wait()
        return ANSWERS[answer]


def now_ms() -> int:
    return int(time.time() * 1000)


def producer(args: argparse.Namespace) -> int:
    """Start a producer publishing ``--topic`` (with a checker unless ``--normal`` or
    ``--delay-ms``), send ``--send`` messages ``"<--body-prefix> i"`` (half messages ended as
    ``--end`` says, normal ones, or with ``--delay-ms`` delay messages due that many ms after
    the send: ``delivery_timestamp`` in ms, as the Python client documents it), then exit, or
    with ``--stay`` keep answering back-checks until SIGTERM. ``--recall`` recalls each delay
    message right after its send, ``--recall-late`` once its due time has passed (the recall's
    outcome is a ``recalled`` or ``recall_failed`` event). ``--message-groups`` sends FIFO
    messages: message i of message group i % len (normal sends, no checker)."""
    untimed = args.delay_ms is None
    if args.message_groups:
        args.normal = True
    checker = Checker(args.check) if untimed and not args.normal else None
    client = Producer(configuration(), (args.topic,), checker)
    client.startup()
    emit("started", client_id=client.client_id)
    if args.wait_go:
        line = sys.stdin.readline()
        assert line.strip() == "go", line
    code = 0
    for i in range(args.send):
        message = Message()
        message.topic = args.topic
        message.body = f"{args.body_prefix} {i}".encode()
        message.keys = f"key-{i}"
        if args.tags:
            message.tag = args.tags[i % len(args.tags)]
        for key, value in (
            args.properties[i % len(args.properties)] if args.properties else {}
        ).items():
            message.add_property(key, value)
        if not untimed:
            message.delivery_timestamp = now_ms() + args.delay_ms
        if args.message_groups:
            message.message_group = args.message_groups[i % len(args.message_groups)]
        try:
            if args.normal or not untimed:
                receipt = client.send(message)
            else:
                transaction = client.begin_transaction()
                receipt = client.send(message, transaction)
        except Exception as exc:  # the client's own exception, reported to the test
            emit("send_failed", index=i, error=type(exc).__name__, message=str(exc))
            code = 3
            break
        emit(
            "sent",
            index=i,
            message_id=receipt.message_id,
            transaction_id=receipt.transaction_id,
            offset=receipt.offset,
            delivery_timestamp=message.delivery_timestamp,
            recall_handle=receipt.recall_handle,
            message_group=message.message_group,
            sent_ms=now_ms(),
        )
        if args.recall or args.recall_late:
            recall(client, args, message, receipt)
        if untimed and not args.normal and args.end != "none":
            (transaction.commit if args.end == "commit" else transaction.rollback)()
            emit("ended", index=i, message_id=receipt.message_id, action=args.end)
    if args.stay:
        STOP.wait()
    client.shutdown()
    emit("stopped")
    return code


def recall(client: Producer, args: argparse.Namespace, message: Message, receipt: Any) -> None:
    """Recall the delay message just sent (``--recall``), or once its due time has passed
    (``--recall-late``, the clock read again after the wait); report the outcome."""
    if args.recall_late:
        while now_ms() <= message.delivery_timestamp:
            time.sleep(max(0.01, (message.delivery_timestamp - now_ms() + 1) / 1000))
    asked_ms = now_ms()
    try:
        recalled_id = client.recall_message(args.topic, receipt.recall_handle)
    except Exception as exc:  # the client's own exception, reported to the test
        emit(
            "recall_failed",
            message_id=receipt.message_id,
            asked_ms=asked_ms,
            error=type(exc).__name__,
            code=getattr(exc, "code", None),
            message=str(exc),
        )
        return
    emit("recalled", message_id=receipt.message_id, recalled_id=recalled_id, asked_ms=asked_ms)


def simple(args: argparse.Namespace) -> int:
    """A SimpleConsumer of ``--group`` on ``--topic`` (subscribed with ``--tag-filter`` or
    ``--sql-filter``, else ``*``): receive (long polling 5 s, invisible ``--invisible-s``) and
    ack until ``--count`` messages came or ``--timeout-s`` passed; with ``--idle-s``, go on
    until a receive after the count came answers nothing for that long (to see that no more
    come). A refused startup or receive is reported as ``failed`` (exit 5)."""
    expression = FilterExpression()
    if args.tag_filter is not None:
        expression = FilterExpression(args.tag_filter, FilterType.TAG)
    elif args.sql_filter is not None:
        expression = FilterExpression(args.sql_filter, FilterType.SQL)
    client = SimpleConsumer(configuration(), args.group, {args.topic: expression}, await_duration=5)
    received = 0
    try:
        client.startup()
        emit("started", client_id=client.client_id)
        deadline = time.monotonic() + args.timeout_s
        while received < args.count and time.monotonic() < deadline and not STOP.is_set():
            received += receive_and_ack(client, args.invisible_s)
        if args.idle_s and received >= args.count:
            idle_until = time.monotonic() + args.idle_s
            while time.monotonic() < idle_until and not STOP.is_set():
                received += receive_and_ack(client, args.invisible_s)
    except Exception as exc:  # the client's own exception, reported to the test
        emit("failed", error=type(exc).__name__, message=str(exc))
        with contextlib.suppress(Exception):
            client.shutdown()
        return 5
    client.shutdown()
    emit("stopped", received=received)
    return 0 if received >= args.count else 4


def receive_and_ack(client: SimpleConsumer, invisible_s: int) -> int:
    """One receive of up to 16 messages, each reported and acked; how many came."""
    messages = client.receive(16, invisible_s)
    for message in messages:
        emit(
            "received",
            message_id=message.message_id,
            body=message.body.decode(),
            topic=message.topic,
            tag=message.tag,
            properties=dict(message.properties or {}),
            delivery_attempt=message.delivery_attempt,
            message_type=message.message_type,
            message_group=message.message_group,
            delivery_timestamp=message.delivery_timestamp,
            received_ms=message.decode_message_timestamp,
        )
        client.ack(message)
    return len(messages)


class Listener(MessageListener):
    """Reports each message it is handed and answers ``--result``; the message whose body is
    ``fail_body`` is answered FAILURE its first ``fail_times`` times, then SUCCESS."""

    def __init__(self, result: str, fail_body: str | None = None, fail_times: int = 0) -> None:
        self.result = ConsumeResult.SUCCESS if result == "success" else ConsumeResult.FAILURE
        self.fail_body, self.failures_left = fail_body, fail_times
        self.lock = threading.Lock()

    def consume(self, message: Message) -> ConsumeResult:
        body = message.body.decode()
        result = self.result
        with self.lock:
            if body == self.fail_body and self.failures_left > 0:
                self.failures_left -= 1
                result = ConsumeResult.FAILURE
        emit(
            "consumed",
            message_id=message.message_id,
            body=body,
            message_group=message.message_group,
            delivery_attempt=message.delivery_attempt,
            result="success" if result == ConsumeResult.SUCCESS else "failure",
            consumed_ms=now_ms(),
        )
        return result


def push(args: argparse.Namespace) -> int:
    """A PushConsumer of ``--group`` on ``--topic`` whose listener answers ``--result``
    (``--fail-body``'s message FAILURE ``--fail-times`` times first), until SIGTERM."""
    listener = Listener(args.result, args.fail_body, args.fail_times)
    client = PushConsumer(configuration(), args.group, listener, {args.topic: FilterExpression()})
    client.startup()
    emit("started", client_id=client.client_id)
    STOP.wait()
    client.shutdown()
    emit("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.rocketmq_app")
    roles = parser.add_subparsers(dest="role", required=True)
    p = roles.add_parser("producer")
    p.add_argument("--topic", required=True)
    p.add_argument("--send", type=int, default=0)
    p.add_argument("--body-prefix", default="Hello RocketMQ")
    p.add_argument("--end", choices=("commit", "rollback", "none"), default="none")
    p.add_argument("--check", choices=(*ANSWERS, "hang", "by-value"), default="unknown")
    p.add_argument("--normal", action="store_true")
    p.add_argument("--wait-go", action="store_true", help='read "go" on stdin before sending')
    p.add_argument("--stay", action="store_true")
    p.add_argument("--tags", type=lambda v: v.split(","), help="message i gets tag i % len")
    p.add_argument("--properties", type=json.loads, help="a JSON list of objects, cycled")
    p.add_argument("--delay-ms", type=int, help="send delay messages due N ms after each send")
    p.add_argument("--message-groups", type=lambda v: v.split(","), help="FIFO: i % len")
    recalls = p.add_mutually_exclusive_group()
    recalls.add_argument("--recall", action="store_true", help="recall each one at once")
    recalls.add_argument("--recall-late", action="store_true", help="recall once it is due")
    s = roles.add_parser("simple")
    s.add_argument("--group", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--timeout-s", type=float, default=60)
    s.add_argument("--invisible-s", type=int, default=15)
    s.add_argument("--tag-filter")
    s.add_argument("--sql-filter")
    s.add_argument("--idle-s", type=float, default=0)
    u = roles.add_parser("push")
    u.add_argument("--group", required=True)
    u.add_argument("--topic", required=True)
    u.add_argument("--result", choices=("success", "failure"), required=True)
    u.add_argument("--fail-body", help="the body of the message to fail --fail-times first")
    u.add_argument("--fail-times", type=int, default=0)
    args = parser.parse_args(argv)
    if args.role == "producer" and (args.recall or args.recall_late) and args.delay_ms is None:
        parser.error("--recall and --recall-late recall delay messages: give --delay-ms")
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    return {"producer": producer, "simple": simple, "push": push}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
