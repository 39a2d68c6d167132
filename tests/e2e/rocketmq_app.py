"""RocketMQ's official Python client (``rocketmq-python-client``, unchanged) in the roles the
end-to-end tests run as subprocesses of their own, so that each can be killed or stopped alone:

    python -m tests.e2e.rocketmq_app producer --topic T [--send N] [--end commit|rollback|none]
        [--check commit|rollback|unknown|hang|by-value] [--normal] [--wait-go] [--stay]
    python -m tests.e2e.rocketmq_app simple --group G --topic T --count N [--timeout-s S]
    python -m tests.e2e.rocketmq_app push --group G --topic T --result success|failure

The broker and the credentials come from the environment: ``ROCKETMQ_ENDPOINT`` (``host:port`` of a
Halfmoon gRPC server), ``ROCKETMQ_ACCESS_KEY`` (an access key's name), ``ROCKETMQ_SECRET_KEY`` (its
SecretKey), ``ROCKETMQ_REQUEST_TIMEOUT_S`` (the client's request timeout, default 3). Each role
writes one JSON object per line on stdout (``{"event": ...}``) and exits when its work is done,
or on SIGTERM once its client is shut down (NotifyClientTermination). The client's own log is
``$HOME/logs/rocketmq_python/rocketmq_client.log``.
"""

from __future__ import annotations

import argparse
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


def producer(args: argparse.Namespace) -> int:
    """Start a producer publishing ``--topic`` (with a checker unless ``--normal``), send
    ``--send`` messages ``"<--body-prefix> i"`` (half messages ended as ``--end`` says, or
    normal ones), then exit, or with ``--stay`` keep answering back-checks until SIGTERM."""
    client = Producer(configuration(), (args.topic,), None if args.normal else Checker(args.check))
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
        try:
            if args.normal:
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
        )
        if not args.normal and args.end != "none":
            (transaction.commit if args.end == "commit" else transaction.rollback)()
            emit("ended", index=i, message_id=receipt.message_id, action=args.end)
    if args.stay:
        STOP.wait()
    client.shutdown()
    emit("stopped")
    return code


def simple(args: argparse.Namespace) -> int:
    """A SimpleConsumer of ``--group`` on ``--topic``: receive (long polling 5 s, invisible
    ``--invisible-s``) and ack until ``--count`` messages came or ``--timeout-s`` passed."""
    client = SimpleConsumer(
        configuration(), args.group, {args.topic: FilterExpression()}, await_duration=5
    )
    client.startup()
    emit("started", client_id=client.client_id)
    received = 0
    deadline = time.monotonic() + args.timeout_s
    while received < args.count and time.monotonic() < deadline and not STOP.is_set():
        for message in client.receive(16, args.invisible_s):
            emit(
                "received",
                message_id=message.message_id,
                body=message.body.decode(),
                topic=message.topic,
                delivery_attempt=message.delivery_attempt,
            )
            client.ack(message)
            received += 1
    client.shutdown()
    emit("stopped", received=received)
    return 0 if received >= args.count else 4


class Listener(MessageListener):
    """Reports each message it is handed and answers ``--result``."""

    def __init__(self, result: str) -> None:
        self.result = ConsumeResult.SUCCESS if result == "success" else ConsumeResult.FAILURE

    def consume(self, message: Message) -> ConsumeResult:
        emit(
            "consumed",
            message_id=message.message_id,
            body=message.body.decode(),
            delivery_attempt=message.delivery_attempt,
        )
        return self.result


def push(args: argparse.Namespace) -> int:
    """A PushConsumer of ``--group`` on ``--topic`` whose listener answers ``--result``, until
    SIGTERM."""
    client = PushConsumer(
        configuration(), args.group, Listener(args.result), {args.topic: FilterExpression()}
    )
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
    s = roles.add_parser("simple")
    s.add_argument("--group", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--timeout-s", type=float, default=60)
    s.add_argument("--invisible-s", type=int, default=15)
    u = roles.add_parser("push")
    u.add_argument("--group", required=True)
    u.add_argument("--topic", required=True)
    u.add_argument("--result", choices=("success", "failure"), required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    return {"producer": producer, "simple": simple, "push": push}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
