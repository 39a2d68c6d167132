"""End to end: a RocketMQ 4.x application, Apache's C++ client through PyPI's
``rocketmq-client-python`` (installed as ../shared/reference/rocketmq-remoting.md section 0
says, from PyPI alone, into a venv cached under ``var/``; its code unchanged), against the
README's processes plus ``python -m halfmoon.remoting`` (NameServer and broker ports).

1. the seed scenario's producer half: a TransactionMQProducer sends ten half messages whose
   local transaction answers UNKNOWN; back-checks reach it as CHECK_TRANSACTION_STATE on its
   connection and its checker answers by value % 3: 1, 4, 7 are committed and received over
   HTTP, 2, 5, 8 rolled back and never received, 0, 3, 6, 9 discarded after the check max;
2. a plain Producer's messages are received over HTTP with the client's UNIQ_KEY as msg_id.

The client runs under ``timeout`` with a scratch ``HOME`` (it logs to ``$HOME/logs``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.e2e.processes import ROOT, Stack, broker_env, free_port, manage, tail
from tests.e2e.test_rocketmq_clients import Halfmoon, last_line

pytestmark = pytest.mark.e2e

DATABASE = "halfmoon_e2e_remoting"
CHECK_SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_MAX": "3",
}
VENV = ROOT / "var" / "rocketmq-cpp-venv"
WHEEL = "rocketmq-client-python==0.5.0rc2"  # ships rocketmq/librocketmq.so and .libs/
WRAPPER = "rocketmq-client-python==2.0.0"  # the ctypes wrapper (sdist, no native library)
APP = ROOT / "tests" / "e2e" / "remoting_app.py"
CLIENT_TIMEOUT_S = 150


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def cpp_client_python() -> Path:
    """The python of a venv holding the C++ client (made once, cached under ``var/``): pip
    installs ``WRAPPER``, pip downloads ``WHEEL`` and its ``rocketmq/librocketmq.so`` and
    ``rocketmq/.libs/`` go beside the wrapper. Skips the test when PyPI cannot be reached."""
    python = VENV / "bin" / "python"
    ready = VENV / ".halfmoon-ready"
    if ready.exists():
        return python
    if not _pypi_reachable():
        pytest.skip("PyPI cannot be reached: the RocketMQ C++ client cannot be installed")
    subprocess.run(["python3.11", "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", WRAPPER], check=True)
    wheels = VENV / "wheel"
    subprocess.run(
        [str(VENV / "bin" / "pip"), "download", "-q", "--no-deps", "--only-binary=:all:",
         "--platform", "manylinux1_x86_64", "--python-version", "3.11", "-d", str(wheels),
         WHEEL],
        check=True,
    )  # fmt: skip
    site = next((VENV / "lib").glob("python3.*/site-packages/rocketmq"))
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name == "rocketmq/librocketmq.so" or name.startswith("rocketmq/.libs/"):
                target = site / name.removeprefix("rocketmq/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    ready.write_text("ok\n")
    return python


class CppClient:
    """``timeout <s> <venv python> remoting_app.py *args`` with a scratch ``HOME``; its JSON
    lines in ``events``."""

    def __init__(self, python: Path, name: str, args: list[str], tmp: Path) -> None:
        self.name = name
        self.home = tmp / f"home-{name}"
        self.home.mkdir()
        self.stderr = tmp / f"{name}.stderr"
        self.events: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                ["timeout", str(CLIENT_TIMEOUT_S), str(python), str(APP), *args],
                env=env,
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
            with suppress(ValueError), self.changed:
                self.events.append(json.loads(raw))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("event") == kind]

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Wait (on the event condition) until ``predicate`` holds.

        Raises:
            AssertionError: the client exited first or ``timeout_s`` passed (with its report)."""
        with self.changed:
            met = self.changed.wait_for(
                lambda: predicate() or self.proc.poll() is not None, timeout=timeout_s
            )
        assert met and predicate(), f"{self.name}: no {what}\n{self.report()}"

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        with suppress(BrokenPipeError):
            self.proc.stdin.close()

    def report(self) -> str:
        logs = sorted((self.home / "logs").rglob("*")) if (self.home / "logs").exists() else []
        log_tail = "\n".join(tail(p, 20) for p in logs if p.is_file())
        return (
            f"----- {self.name} (exit {self.proc.poll()})\n"
            + "\n".join(json.dumps(e) for e in self.events[-30:])
            + f"\n--- stderr\n{tail(self.stderr)}\n--- client log\n{log_tail}"
        )

    def kill(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def remoting(
    tmp_path_factory: pytest.TempPathFactory,
    migrated_database: Callable[[str], AbstractContextManager[str]],
    static_files: Callable[[Path], None],
) -> Iterator[tuple[Halfmoon, str, Path]]:
    """The README's processes and ``python -m halfmoon.remoting`` (anonymous calls allowed),
    short check settings, topics ``RemotingTx``/``RemotingPlain``, consumer group
    ``RemotingConsumers``. Yields the broker, the NameServer address and the client's python."""
    python = cpp_client_python()
    tmp = tmp_path_factory.mktemp("remoting")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()
    with migrated_database(DATABASE) as database_url:
        env = broker_env(
            database_url=database_url,
            redis_url=redis_url,
            var_dir=tmp / "var",
            settings=CHECK_SETTINGS,
        )
        static_files(tmp / "var")
        admin_token = last_line(manage(env, "create_access_key", "e2e-admin", "--admin"))
        stack = Stack(env, tmp)
        hm = Halfmoon(stack, tmp, "", database_url, admin_token, "", "")
        try:
            hm.url = stack.start_broker(free_port())
            namesrv, broker = free_port(), free_port()
            stack.start(
                "remoting", "-m", "halfmoon.remoting", "--host", "127.0.0.1",
                "--namesrv-port", str(namesrv), "--port", str(broker),
                env={"HALFMOON_REMOTING_ALLOW_ANONYMOUS": "true"},
            )  # fmt: skip
            stack.wait_until("the remoting server", lambda: _listening(broker))
            for topic in ("RemotingTx", "RemotingPlain"):
                assert hm.api("POST", "/topics", json={"name": topic}).status_code == 201
            answer = hm.api("POST", "/consumer-groups", json={"name": "RemotingConsumers"})
            assert answer.status_code == 201, answer.text
            yield hm, f"127.0.0.1:{namesrv}", python
        finally:
            stack.stop()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def receive_over_http(hm: Halfmoon, topic: str, wait_ms: int = 2000) -> list[dict[str, Any]]:
    answer = hm.api(
        "POST",
        "/consumer-groups/RemotingConsumers/receive",
        json={"topic": topic, "max_messages": 32, "wait_ms": wait_ms},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def test_seed_scenario_producer_half_over_remoting(remoting: tuple[Halfmoon, str, Path]) -> None:
    hm, namesrv, python = remoting
    client = CppClient(python, "tx", ["tx", namesrv, "RemotingTx", "RemotingTxGroup"], hm.tmp)
    try:
        client.wait_for("ten sends", lambda: len(client.of("sent")) == 10, 60)
        sent = {e["value"]: e for e in client.of("sent")}
        assert all(e["status"] == 0 for e in sent.values()), client.report()
        states: dict[str, str] = {}

        def settled() -> bool:
            rows = hm.sql(
                "SELECT transaction_id, state FROM broker_transaction WHERE topic = 'RemotingTx'"
            )
            states.clear()
            states.update(dict(rows))
            return len(rows) == 10 and "PREPARED" not in states.values()

        hm.wait("every transaction settled", settled)
        by_value = {v: states[sent[v]["msg_id"]] for v in range(10)}
        assert by_value == {
            v: {1: "COMMITTED", 2: "ROLLED_BACK", 0: "DISCARDED"}[v % 3] for v in range(10)
        }, f"{by_value}\n{client.report()}"
        checked = {e["value"] for e in client.of("check")}
        assert checked == set(range(10)), client.report()
        assert {e["topic"] for e in client.of("check")} == {"RemotingTx"}
        received: list[dict[str, Any]] = []
        hm.wait(
            "the committed messages over HTTP",
            lambda: received.extend(receive_over_http(hm, "RemotingTx")) or len(received) >= 3,
        )
        assert sorted(m["body"] for m in received) == [
            "Hello RocketMQ 1",
            "Hello RocketMQ 4",
            "Hello RocketMQ 7",
        ]
        assert {m["msg_id"] for m in received} == {sent[v]["msg_id"] for v in (1, 4, 7)}
        assert receive_over_http(hm, "RemotingTx", wait_ms=0) == []
        client.close_stdin()
        client.wait_for("a clean stop", lambda: bool(client.of("stopped")), 30)
    finally:
        client.kill()


def test_plain_sends_keep_the_clients_message_id(remoting: tuple[Halfmoon, str, Path]) -> None:
    hm, namesrv, python = remoting
    client = CppClient(python, "send", ["send", namesrv, "RemotingPlain", "PlainGroup"], hm.tmp)
    try:
        client.wait_for("a clean stop", lambda: bool(client.of("stopped")), 60)
        sent = client.of("sent")
        assert [e["status"] for e in sent] == [0, 0, 0], client.report()
        received: list[dict[str, Any]] = []
        hm.wait(
            "the plain messages over HTTP",
            lambda: received.extend(receive_over_http(hm, "RemotingPlain")) or len(received) >= 3,
        )
        by_body = {m["body"]: m for m in received}
        assert sorted(by_body) == ["plain-0", "plain-1", "plain-2"]
        for event in sent:
            message = by_body[f"plain-{event['value']}"]
            assert message["msg_id"] == event["msg_id"]
            assert message["tags"] == "TagP"
            assert message["keys"] == f"plain-key-{event['value']}"
            assert message["properties"].get("userProp") == f"v{event['value']}"
    finally:
        client.kill()
