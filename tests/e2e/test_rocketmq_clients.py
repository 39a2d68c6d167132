"""End to end: RocketMQ's official Python client (``rocketmq-python-client``, unchanged) against
real broker processes, started as the README says (web, Celery worker and beat, and the gRPC
server ``python -m halfmoon.grpc``), with short check settings (timeout 1 s, interval 1 s, 3
checks) and access keys with a SecretKey (``manage.py access_key_secret``).

Each client runs in a subprocess of its own (tests/e2e/rocketmq_app.py, or the README's
example), so that one can be killed alone. Outcomes are read in the clients' output and in the
database:

1. the seed scenario is the README's "RocketMQ clients" example itself: ten half messages
   answered UNKNOW, a checker answering by value % 3; its SimpleConsumer gets exactly 1, 4, 7;
   2, 5, 8 are rolled back; 0, 3, 6, 9 discarded after 3 checks, every check over telemetry;
2. PushConsumers: a failing listener's messages reach ``%DLQ%<group>`` after the group's max
   delivery attempts (2), a succeeding one acks each message once;
3. a send the client retries (its first answer held by a proxy past the client's timeout) is
   stored once; a wrong signature is refused (UNAUTHORIZED); the client that sent a half
   message is killed while checking it and another client of the group answers the next check;
4. an operator's commit in the console (Chromium) of a half message sent over gRPC reaches a gRPC
   SimpleConsumer; an HTTP producer's commit reaches a gRPC consumer and a gRPC producer's
   commit an HTTP consumer;
5. filters applied by the broker: a SimpleConsumer subscribed with ``TagA || TagB`` gets exactly
   those messages (the TagC ones never handed out, consumed), one with ``a > 5 AND b = 'x'``
   exactly the matching ones; a malformed SQL92 subscription is refused.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
import redis
from playwright.sync_api import expect, sync_playwright
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2, service_pb2_grpc

from tests.e2e.processes import (
    ROOT,
    Stack,
    broker_env,
    chromium_launch,
    console_sign_in,
    free_port,
    manage,
    tail,
)

pytestmark = pytest.mark.e2e

PG_DATABASE = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_rocketmq"
OPERATOR_PASSWORD = "rocketmq-operator-pw"  # noqa: S105 - a test console user's
REDIS_URL = "redis://127.0.0.1:6379/9"
CHECK_SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_MAX": "3",
}
WAIT_S = 90
EXPECTED_CONSUMED = ["Hello RocketMQ 1", "Hello RocketMQ 4", "Hello RocketMQ 7"]
TOPICS = (
    "TranTest", "PushTopic", "RetryTopic", "AuthTopic", "KillTopic", "OperatorTopic",
    "HttpToGrpc", "GrpcToHttp", "FilterTopic", "SqlTopic",
)  # fmt: skip
CONSUMER_GROUPS = {
    "TranTestConsumers": None,
    "PushOk": None,
    "PushFails": 2,
    "OperatorConsumers": None,
    "InteropConsumers": None,
    "HttpConsumers": None,
    "TagConsumers": None,
    "SqlConsumers": None,
    "BadSqlConsumers": None,
}
"""Consumer groups to create and their max_delivery_attempts (None: the default)."""


def readme_example() -> str:
    """The first ``python`` block of docs/rocketmq-clients.md's "The transaction example"."""
    doc = (ROOT / "docs" / "rocketmq-clients.md").read_text()
    section = doc.split("\n## The transaction example\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "docs/rocketmq-clients.md's transaction example has no python block"
    return match.group(1)


class Client:
    """A RocketMQ client subprocess (``python *argv`` in its own session, ``HOME`` of its own
    for the client's log); each line it prints is kept in ``events`` (a JSON object, or
    ``{"event": "text", "line": ...}``)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], tmp: Path) -> None:
        self.name = name
        self.home = tmp / f"home-{name}"
        self.home.mkdir()
        self.stderr = tmp / f"{name}.stderr"
        self.events: list[dict[str, Any]] = []
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=ROOT,
                env={**env, "HOME": str(self.home)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "text", "line": line}
            self.events.append(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of kind ``kind`` so far."""
        return [e for e in list(self.events) if e["event"] == kind]

    def lines(self) -> list[str]:
        """The plain text lines printed so far."""
        return [e["line"] for e in self.of("text")]

    def one(self, kind: str) -> dict[str, Any]:
        """The first event of kind ``kind`` (AssertionError with the report if none)."""
        found = self.of(kind)
        assert found, f"{self.name} printed no {kind}\n{self.report()}"
        return found[0]

    def send_line(self, line: str) -> None:
        """Write ``line`` on the client's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{line}\n".encode())
        self.proc.stdin.flush()

    def report(self) -> str:
        """Exit status, output, stderr's and the client log's tails."""
        log = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        return (
            f"----- client {self.name} (exit {self.proc.poll()})\n"
            + "\n".join(json.dumps(e) for e in self.events[-40:])
            + f"\n--- stderr\n{tail(self.stderr)}\n--- client log\n{tail(log, 30)}"
        )

    def client_log(self) -> str:
        """The RocketMQ client's own log so far ("" when none)."""
        log = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def terminate(self, timeout_s: float = 30) -> int | None:
        """SIGTERM (the client shuts down), then SIGKILL after ``timeout_s``; its exit code."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(timeout=5)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL its whole session."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


@dataclass
class Halfmoon:
    """The broker under test and what the scenarios need of it."""

    stack: Stack
    tmp: Path
    url: str
    database_url: str
    admin_token: str
    admin_secret: str
    app_secret: str
    clients: list[Client] = field(default_factory=list)

    def client_env(
        self,
        *,
        access_key: str = "e2e-admin",
        secret: str | None = None,
        endpoint: str | None = None,
        **extra: str,
    ) -> dict[str, str]:
        """A client's environment: this one's without the broker's settings, plus the
        endpoint (the gRPC server's by default) and credentials (``e2e-admin``'s by default)."""
        if secret is None:
            secret = self.admin_secret if access_key == "e2e-admin" else self.app_secret
        return {
            **{
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("HALFMOON_", "DJANGO_", "CELERY_", "DATABASE_", "REDIS_"))
            },
            "PYTHONUNBUFFERED": "1",
            "ROCKETMQ_ENDPOINT": endpoint or self.stack.grpc_endpoint,
            "ROCKETMQ_ACCESS_KEY": access_key,
            "ROCKETMQ_SECRET_KEY": secret,
            **extra,
        }

    def client(self, name: str, *role: str, **env: Any) -> Client:
        """Start ``python -m tests.e2e.rocketmq_app *role`` as ``name`` (``env``: as
        ``client_env``)."""
        started = Client(
            name, ["-m", "tests.e2e.rocketmq_app", *role], self.client_env(**env), self.tmp
        )
        self.clients.append(started)
        return started

    def report(self) -> str:
        return "\n".join([*(c.report() for c in self.clients), self.stack.report()])

    def wait(self, what: str, predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        """Poll ``predicate`` every 0.2 s until true while the broker's processes live.

        Raises:
            AssertionError: a broker process died, or ``timeout_s`` passed (with every log).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n for n, p in self.stack.procs.items() if p.poll() is not None]
            assert not dead, f"{', '.join(dead)} exited early\n{self.report()}"
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.report()}")

    def started(self, client: Client) -> str:
        """Wait until ``client`` has started; its client id."""
        self.wait(f"{client.name} to start", lambda: bool(client.of("started")) or exited(client))
        return client.one("started")["client_id"]

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of ``query`` on the broker's database."""
        url = self.database_url.replace("postgres://", "postgresql://", 1)
        with psycopg.connect(url) as conn:
            return conn.execute(query, params).fetchall()

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """``method`` ``/api/v1<path>`` with the admin key."""
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        return httpx.request(
            method, f"{self.url}/api/v1{path}", headers=headers, timeout=40, **kwargs
        )


def exited(client: Client) -> bool:
    """Raises AssertionError (with its report) when ``client`` exited; False otherwise."""
    assert client.proc.poll() is None, f"{client.name} exited\n{client.report()}"
    return False


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1].strip()


@pytest.fixture(scope="module")
def halfmoon(
    tmp_path_factory: pytest.TempPathFactory,
    migrated_database: Callable[[str], AbstractContextManager[str]],
    static_files: Callable[[Path], None],
) -> Iterator[Halfmoon]:
    tmp = tmp_path_factory.mktemp("rocketmq")
    with redis.Redis.from_url(REDIS_URL) as r:
        r.flushdb()
    with migrated_database(PG_DATABASE) as database_url:
        env = broker_env(
            database_url=database_url,
            redis_url=REDIS_URL,
            var_dir=tmp / "var",
            settings=CHECK_SETTINGS,
        )
        static_files(tmp / "var")
        manage(env, "create_console_user", "operator", "--role", "operator",
               "--password", OPERATOR_PASSWORD)  # fmt: skip
        admin_token = last_line(manage(env, "create_access_key", "e2e-admin", "--admin"))
        admin_secret = last_line(manage(env, "access_key_secret", "e2e-admin"))
        manage(
            env, "create_access_key", "orders-app", "--producer-group", "TranTestGroup",
            "--consumer-group", "TranTestConsumers",
        )  # fmt: skip
        app_secret = last_line(manage(env, "access_key_secret", "orders-app"))
        stack = Stack(env, tmp)
        hm = Halfmoon(stack, tmp, "", database_url, admin_token, admin_secret, app_secret)
        try:
            hm.url = stack.start_broker(free_port())
            for topic in TOPICS:
                assert hm.api("POST", "/topics", json={"name": topic}).status_code == 201
            for group in ("TranTestGroup", "HttpProducers"):
                answer = hm.api("POST", "/producer-groups", json={"name": group})
                assert answer.status_code == 201, answer.text
            for group, attempts in CONSUMER_GROUPS.items():
                body = {"name": group}
                if attempts:
                    body["max_delivery_attempts"] = attempts
                assert hm.api("POST", "/consumer-groups", json=body).status_code == 201
            yield hm
        finally:
            for client in hm.clients:
                client.kill()
            stack.stop()


def test_seed_scenario_is_the_readme_example(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    example = hm.tmp / "readme_example.py"
    example.write_text(readme_example())
    env = hm.client_env(access_key="orders-app")
    client = Client("readme-example", [str(example)], env, hm.tmp)
    hm.clients.append(client)

    expected = Counter({("COMMITTED", 1): 3, ("ROLLED_BACK", 1): 3, ("DISCARDED", 3): 4})

    def states() -> Counter:
        rows = hm.sql(
            "SELECT state, check_times FROM broker_transaction WHERE producer_group = %s",
            "TranTestGroup",
        )
        return Counter(map(tuple, rows))

    def acked() -> int:
        rows = hm.sql(
            "SELECT count(*) FROM broker_deliveryevent WHERE consumer_group = %s AND kind = %s",
            "TranTestConsumers",
            "acked",
        )
        return rows[0][0]

    hm.wait("the seed's outcome", lambda: states() == expected and acked() == 3)
    hm.wait("the example to print 3 messages", lambda: len(consumed(client)) == 3)
    client.terminate()
    report = hm.report()
    lines = client.lines()

    assert consumed(client) == EXPECTED_CONSUMED, report
    for value in range(10):
        checks = [line for line in lines if line.startswith(f"check Hello RocketMQ {value} -> ")]
        answer = ("TRANSACTION_RESOLUTION_UNSPECIFIED", "COMMIT", "ROLLBACK")[value % 3]
        times = 3 if value % 3 == 0 else 1
        assert checks == [f"check Hello RocketMQ {value} -> {answer}"] * times, report
    bodies = hm.sql("SELECT body FROM broker_message WHERE topic = %s", "TranTest")
    assert sorted(bytes(b).decode() for (b,) in bodies) == EXPECTED_CONSUMED, report
    # Every check went over the telemetry stream of the example's producer.
    checks = hm.sql(
        "SELECT e.actor, e.detail->>'client_id' FROM broker_transactionevent e"
        " JOIN broker_transaction t USING (transaction_id)"
        " WHERE t.producer_group = %s AND e.kind = 'check_sent'",
        "TranTestGroup",
    )
    senders = hm.sql(
        "SELECT DISTINCT producer_client_id FROM broker_transaction WHERE producer_group = %s",
        "TranTestGroup",
    )
    assert len(senders) == 1 and senders[0][0], report
    assert Counter(checks) == Counter({("telemetry", senders[0][0]): 18}), report


def consumed(client: Client) -> list[str]:
    """The bodies the README example consumed, sorted."""
    return sorted(
        line.removeprefix("Consumed: ") for line in client.lines() if line.startswith("Consumed: ")
    )


def test_push_consumers_dead_letter_and_ack_once(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    ok = hm.client("push-ok", "push", "--group", "PushOk", "--topic", "PushTopic",
                   "--result", "success")  # fmt: skip
    fails = hm.client("push-fails", "push", "--group", "PushFails", "--topic", "PushTopic",
                      "--result", "failure")  # fmt: skip
    hm.started(ok)
    hm.started(fails)
    producer = hm.client("push-producer", "producer", "--topic", "PushTopic", "--send", "3",
                         "--end", "commit", "--body-prefix", "push")  # fmt: skip
    hm.wait("3 commits", lambda: len(producer.of("ended")) == 3 or exited_early(producer, 3))
    sent = sorted(e["message_id"] for e in producer.of("sent"))

    def journal(group: str, kind: str) -> Counter:
        rows = hm.sql(
            "SELECT msg_id FROM broker_deliveryevent WHERE consumer_group = %s AND kind = %s",
            group,
            kind,
        )
        return Counter(r[0] for r in rows)

    hm.wait(
        "3 dead letters of PushFails", lambda: sorted(journal("PushFails", "dead_lettered")) == sent
    )
    hm.wait("3 acks of PushOk", lambda: sorted(journal("PushOk", "acked")) == sent)
    report = hm.report()
    dlq = hm.sql("SELECT msg_id FROM broker_message WHERE topic = %s", "%DLQ%PushFails")
    assert sorted(r[0] for r in dlq) == sent, report
    # The failing listener had each message twice (the group's max delivery attempts).
    attempts = Counter((e["message_id"], e["delivery_attempt"]) for e in fails.of("consumed"))
    assert attempts == Counter({(m, a): 1 for m in sent for a in (1, 2)}), report
    # The succeeding one: each message once, acked once, never delivered again.
    assert journal("PushOk", "acked") == Counter({m: 1 for m in sent}), report
    assert journal("PushOk", "delivered") == Counter({m: 1 for m in sent}), report
    assert sorted(e["message_id"] for e in ok.of("consumed")) == sent, report
    assert not journal("PushOk", "dead_lettered"), report
    assert ok.terminate() == 0, ok.report()
    assert fails.terminate() == 0, fails.report()


def exited_early(client: Client, code: int | None = 0) -> bool:
    """Raises AssertionError when ``client`` exited with another code than ``code``."""
    status = client.proc.poll()
    assert status is None or status == code, f"{client.name} exited {status}\n{client.report()}"
    return False


class HoldingProxy:
    """A TCP proxy in front of a gRPC server: what the client sends passes at once (counting
    how often ``marker`` went by), what the server answers waits while ``flowing`` is clear."""

    def __init__(self, upstream_port: int, marker: bytes) -> None:
        self.upstream_port = upstream_port
        self.marker = marker
        self.marker_seen = 0
        self.flowing = threading.Event()
        self.flowing.set()
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", free_port()))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with suppress(OSError):
            while True:
                down, _ = self.listener.accept()
                up = socket.create_connection(("127.0.0.1", self.upstream_port))
                threading.Thread(target=self._pipe, args=(down, up, True), daemon=True).start()
                threading.Thread(target=self._pipe, args=(up, down, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, to_server: bool) -> None:
        keep = b""
        with suppress(OSError):
            while data := src.recv(65536):
                if to_server:
                    seen = keep + data
                    with self._lock:
                        self.marker_seen += seen.count(self.marker) - keep.count(self.marker)
                    keep = seen[-(len(self.marker) - 1) :]
                else:
                    self.flowing.wait()
                dst.sendall(data)
        for sock in (src, dst):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.flowing.set()
        self.listener.close()


def test_a_send_retried_by_the_client_is_stored_once(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    body = f"retried-send-{uuid.uuid4().hex}"
    upstream = free_port()
    proxy = HoldingProxy(upstream, f"{body} 0".encode())
    try:
        # A gRPC server whose routes name the proxy: every call of the client goes through it.
        hm.stack.start_grpc(
            upstream,
            name="grpc-proxied",
            env={"HALFMOON_GRPC_ENDPOINT": f"127.0.0.1:{proxy.port}"},
        )
        producer = hm.client(
            "retrying-producer", "producer", "--topic", "RetryTopic", "--send", "1",
            "--end", "commit", "--body-prefix", body, "--wait-go",
            endpoint=f"127.0.0.1:{proxy.port}", ROCKETMQ_REQUEST_TIMEOUT_S="1",
        )  # fmt: skip
        hm.started(producer)
        proxy.flowing.clear()  # the first SendMessage's answer is held past the client's timeout
        producer.send_line("go")
        hm.wait("the client to send the half message again", lambda: proxy.marker_seen >= 2)
        stored = hm.sql("SELECT count(*) FROM broker_transaction WHERE topic = %s", "RetryTopic")
        assert stored == [(1,)], hm.report()
        proxy.flowing.set()
        hm.wait("the commit", lambda: bool(producer.of("ended")) or exited_early(producer))
    finally:
        proxy.close()
    report = hm.report()
    message_id = producer.one("sent")["message_id"]
    assert not producer.of("send_failed"), report
    rows = hm.sql(
        "SELECT transaction_id, state FROM broker_transaction WHERE topic = %s", "RetryTopic"
    )
    assert rows == [(message_id, "COMMITTED")], report
    stored = hm.sql("SELECT topic FROM broker_message WHERE msg_id = %s ORDER BY 1", message_id)
    assert stored == [("RMQ_SYS_TRANS_HALF_TOPIC",), ("RetryTopic",)], report
    # Without --stay the producer shuts its client down and exits by itself: wait for that
    # (a SIGTERM sent while its interpreter finalizes would meet the default handler).
    hm.wait("the producer to shut down and exit", lambda: producer.proc.poll() is not None)
    assert producer.proc.returncode == 0, producer.report()


def bad_signature_metadata(access_key: str) -> list[tuple[str, str]]:
    """A Python client's metadata for ``access_key`` signed with a wrong secret."""
    date_time = datetime.now().strftime("%Y%m%dT%H%M%SZ")
    return [
        ("x-mq-language", "PYTHON"),
        ("x-mq-protocol", "GRPC_V2"),
        ("x-mq-client-version", "5.1.2"),
        ("x-mq-date-time", date_time),
        ("x-mq-request-id", str(uuid.uuid4())),
        ("x-mq-client-id", "e2e@1@0@bad-signature"),
        ("x-mq-namespace", ""),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
            f"Signature={'0' * 40}",
        ),
    ]


def test_a_wrong_signature_is_refused(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    producer = hm.client(
        "wrong-secret", "producer", "--topic", "AuthTopic", "--send", "1", "--end", "commit",
        secret="not-the-secret-key",
    )  # fmt: skip
    assert producer.proc.wait(timeout=60) == 3, producer.report()
    producer._reader.join(timeout=5)
    failed = producer.one("send_failed")
    # The Python client asks for the route first: its UnauthorizedException (code 40100) is
    # logged and the send fails for want of a route.
    assert "AuthTopic" in failed["message"], producer.report()
    assert f"{Code.UNAUTHORIZED}, " in producer.client_log(), producer.report()

    with grpc.insecure_channel(hm.stack.grpc_endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.SendMessageRequest()
        message = request.messages.add()
        message.topic.name = "AuthTopic"
        message.body = b"refused"
        message.system_properties.message_id = "01AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
        message.system_properties.message_type = definition_pb2.MessageType.TRANSACTION
        message.system_properties.body_encoding = definition_pb2.Encoding.IDENTITY
        answer = stub.SendMessage(request, metadata=bad_signature_metadata("e2e-admin"), timeout=10)
    assert answer.status.code == Code.UNAUTHORIZED, answer
    stored = hm.sql("SELECT count(*) FROM broker_message WHERE topic = %s", "AuthTopic")
    assert stored == [(0,)], hm.report()


def test_a_killed_producer_s_check_is_answered_by_another_client(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    answering = hm.client("answering", "producer", "--topic", "KillTopic", "--check", "commit",
                          "--stay")  # fmt: skip
    answering_id = hm.started(answering)
    sending = hm.client("sending", "producer", "--topic", "KillTopic", "--send", "1",
                        "--check", "hang", "--stay")  # fmt: skip
    sending_id = hm.started(sending)
    hm.wait("the sender's first check", lambda: bool(sending.of("check")) or exited(sending))
    message_id = sending.one("sent")["message_id"]
    assert sending.one("check")["message_id"] == message_id, hm.report()
    sending.kill()  # SIGKILL while its checker has not answered

    def state() -> str:
        rows = hm.sql("SELECT state FROM broker_transaction WHERE transaction_id = %s", message_id)
        return rows[0][0]

    hm.wait("the other client's commit", lambda: state() == "COMMITTED")
    report = hm.report()
    assert [e["message_id"] for e in answering.of("check")] == [message_id], report
    resolution = hm.sql(
        "SELECT r.resolved_by, r.reason, t.producer_group, t.producer_client_id"
        " FROM broker_resolution r JOIN broker_transaction t USING (transaction_id)"
        " WHERE t.transaction_id = %s",
        message_id,
    )
    assert resolution == [("check", f"gRPC client {answering_id}", "KillTopic", sending_id)], report
    checks = hm.sql(
        "SELECT actor, detail->>'client_id' FROM broker_transactionevent"
        " WHERE transaction_id = %s AND kind = 'check_sent' ORDER BY id",
        message_id,
    )
    assert checks[0] == ("telemetry", sending_id), report
    assert checks[-1] == ("telemetry", answering_id), report
    timeline = hm.api("GET", f"/transactions/{message_id}/timeline").json()
    assert any("telemetry" in item["title"] for item in timeline["timeline"]), timeline
    assert answering.terminate() == 0, answering.report()


def test_an_operator_s_commit_reaches_a_grpc_consumer(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    consumer = hm.client("operator-consumer", "simple", "--group", "OperatorConsumers",
                         "--topic", "OperatorTopic", "--count", "1")  # fmt: skip
    hm.started(consumer)
    # The producer exits after its send: no live client, so its checks are not delivered.
    producer = hm.client("operator-producer", "producer", "--topic", "OperatorTopic",
                         "--send", "1", "--body-prefix", "left to the operator")  # fmt: skip
    assert producer.proc.wait(timeout=60) == 0, producer.report()
    producer._reader.join(timeout=5)
    message_id = producer.one("sent")["message_id"]
    reason = "paid, checked by hand"
    with sync_playwright() as playwright:
        browser = chromium_launch(playwright)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            console_sign_in(page, hm.url, "operator", OPERATOR_PASSWORD)
            page.goto(f"{hm.url}/console/transactions/{message_id}/")
            expect(page.locator("#tx-state")).to_have_text("PREPARED")
            page.get_by_role("button", name=re.compile(r"^commit", re.I)).first.click()
            dialog = page.locator("dialog[open]")
            dialog.locator('textarea[name="reason"]').fill(reason)
            dialog.locator('[type="submit"]').first.click()
            expect(page.locator("#tx-state")).to_have_text("COMMITTED")
            expect(page.locator("ol.timeline")).to_contain_text(reason)
        finally:
            browser.close()
    hm.wait("the consumer to receive it", lambda: bool(consumer.of("received")))
    received = consumer.one("received")
    assert (received["message_id"], received["body"]) == (message_id, "left to the operator 0")
    assert consumer.proc.wait(timeout=30) == 0, consumer.report()


def test_http_and_grpc_clients_see_each_other_s_commits(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    consumer = hm.client("interop-consumer", "simple", "--group", "InteropConsumers",
                         "--topic", "HttpToGrpc", "--count", "1")  # fmt: skip
    hm.started(consumer)
    half = hm.api(
        "POST",
        "/transactions",
        json={"producer_group": "HttpProducers", "topic": "HttpToGrpc", "body": "from http"},
    )
    assert half.status_code == 201, half.text
    msg_id = half.json()["msg_id"]
    end = hm.api(
        "POST",
        f"/transactions/{msg_id}/end",
        json={"producer_group": "HttpProducers", "action": "commit"},
    )
    assert end.status_code == 200, end.text
    hm.wait("the gRPC consumer to receive it", lambda: bool(consumer.of("received")))
    received = consumer.one("received")
    assert (received["message_id"], received["body"]) == (msg_id, "from http"), consumer.report()
    assert consumer.proc.wait(timeout=30) == 0, consumer.report()

    producer = hm.client("interop-producer", "producer", "--topic", "GrpcToHttp", "--send", "1",
                         "--end", "commit", "--body-prefix", "from grpc")  # fmt: skip
    assert producer.proc.wait(timeout=60) == 0, producer.report()
    producer._reader.join(timeout=5)
    message_id = producer.one("sent")["message_id"]
    answer = hm.api(
        "POST",
        "/consumer-groups/HttpConsumers/receive",
        json={"topic": "GrpcToHttp", "wait_ms": 10000},
    )
    assert answer.status_code == 200, answer.text
    messages = answer.json()["messages"]
    assert [(m["msg_id"], m["body"]) for m in messages] == [(message_id, "from grpc 0")], messages
    acked = hm.api(
        "POST",
        "/consumer-groups/HttpConsumers/ack",
        json={"receipt_handles": [messages[0]["receipt_handle"]]},
    )
    assert acked.json() == {"acked": 1, "failed": []}, acked.text


def journalled(hm: Halfmoon, group: str) -> Counter:
    """The delivery journal of ``group`` by (msg_id, kind)."""
    rows = hm.sql("SELECT msg_id, kind FROM broker_deliveryevent WHERE consumer_group = %s", group)
    return Counter((r[0], r[1]) for r in rows)


def test_a_tag_subscription_receives_exactly_its_tags(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    producer = hm.client("tag-producer", "producer", "--topic", "FilterTopic", "--normal",
                         "--send", "12", "--tags", "TagA,TagB,TagC",
                         "--body-prefix", "tagged")  # fmt: skip
    assert producer.proc.wait(timeout=60) == 0, producer.report()
    producer._reader.join(timeout=5)
    sent = {e["index"]: e["message_id"] for e in producer.of("sent")}
    wanted = sorted(sent[i] for i in range(12) if i % 3 != 2)
    tag_c = sorted(sent[i] for i in range(12) if i % 3 == 2)
    # --idle-s: once the 8 came, receive 6 s more to see that nothing else comes.
    consumer = hm.client("tag-consumer", "simple", "--group", "TagConsumers",
                         "--topic", "FilterTopic", "--count", "8", "--idle-s", "6",
                         "--tag-filter", "TagA || TagB")  # fmt: skip
    assert consumer.proc.wait(timeout=90) == 0, consumer.report()
    consumer._reader.join(timeout=5)
    received = consumer.of("received")
    assert sorted(e["message_id"] for e in received) == wanted, consumer.report()
    assert {e["tag"] for e in received} == {"TagA", "TagB"}
    # The TagC messages were never in flight: no delivery row, no journal entry; consumed.
    assert not any(m in tag_c for m, _ in journalled(hm, "TagConsumers")), hm.report()
    in_flight = hm.sql(
        "SELECT count(*) FROM broker_delivery WHERE consumer_group = %s", "TagConsumers"
    )
    assert in_flight == [(0,)]
    lag = hm.api("GET", "/consumer-groups/TagConsumers/offsets").json()
    assert sum(o["lag"] for o in lag) == 0, lag
    subscriptions = hm.api("GET", "/consumer-groups/TagConsumers/subscriptions").json()
    assert [(s["topic"], s["expression_type"], s["expression"])
            for s in subscriptions["subscriptions"]] == [
        ("FilterTopic", "TAG", "TagA || TagB")
    ]  # fmt: skip


def test_an_sql92_subscription_receives_exactly_the_matching_ones(halfmoon: Halfmoon) -> None:
    hm = halfmoon
    properties = [{"a": "10", "b": "x"}, {"a": "3", "b": "x"}, {"a": "7", "b": "y"},
                  {"a": "6", "b": "x"}, {"b": "x"}, {"a": "nine", "b": "x"}]  # fmt: skip
    producer = hm.client("sql-producer", "producer", "--topic", "SqlTopic", "--normal",
                         "--send", "6", "--properties", json.dumps(properties))  # fmt: skip
    assert producer.proc.wait(timeout=60) == 0, producer.report()
    producer._reader.join(timeout=5)
    sent = {e["index"]: e["message_id"] for e in producer.of("sent")}
    consumer = hm.client("sql-consumer", "simple", "--group", "SqlConsumers",
                         "--topic", "SqlTopic", "--count", "2", "--idle-s", "6",
                         "--sql-filter", "a > 5 AND b = 'x'")  # fmt: skip
    assert consumer.proc.wait(timeout=90) == 0, consumer.report()
    consumer._reader.join(timeout=5)
    got = sorted(e["message_id"] for e in consumer.of("received"))
    assert got == sorted([sent[0], sent[3]]), consumer.report()

    bad = hm.client("bad-sql-consumer", "simple", "--group", "BadSqlConsumers",
                    "--topic", "SqlTopic", "--count", "1", "--timeout-s", "10",
                    "--sql-filter", "a > AND b = 'x'")  # fmt: skip
    assert bad.proc.wait(timeout=60) == 5, bad.report()
    bad._reader.join(timeout=5)
    failure = bad.one("failed")
    assert "position 5" in failure["message"], bad.report()
    assert not hm.sql(
        "SELECT 1 FROM broker_deliveryevent WHERE consumer_group = %s", "BadSqlConsumers"
    )
