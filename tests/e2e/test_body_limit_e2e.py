"""End to end: request bodies bounded while they stream, through a real uvicorn serving
``halfmoon.asgi`` (one worker, a fresh PostgreSQL database, Redis db 3) with the default limit
(``DATA_UPLOAD_MAX_MEMORY_SIZE``: twice ``HALFMOON_MAX_MESSAGE_SIZE`` plus 1 MiB, 9 MiB).

- A chunked half message (httpx with a generator body, no Content-Length) is stored whole.
- A 50 MiB upload is refused early with 413 ``request_too_large``, declared (Content-Length) or
  chunked: the answer comes while the client is still sending, which a raw socket shows by
  reading it before sending the rest, and the client stops long before 50 MiB.
- The server serves the next request as before; nothing refused is stored.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.e2e.processes import Stack, broker_env, free_port, healthy, manage
from tests.e2e.session import migrated_database

pytestmark = pytest.mark.e2e

PG_DATABASE = "halfmoon_e2e_body_limit"
REDIS_URL = "redis://127.0.0.1:6379/3"
MIB = 1024 * 1024
LIMIT = 9 * MIB  # the default: 2 * 4 MiB (HALFMOON_MAX_MESSAGE_SIZE) + 1 MiB
UPLOAD = 50 * MIB
PIECE = 64 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """One web server (``python -m halfmoon.web``: uvicorn serving ``halfmoon.asgi``) on a free port, with topic TranTest and
    producer group G; yields (base URL, admin token)."""
    tmp = tmp_path_factory.mktemp("body_limit")
    with redis.Redis.from_url(REDIS_URL) as r:
        r.flushdb()
    with migrated_database(PG_DATABASE) as database_url:
        env = broker_env(database_url=database_url, redis_url=REDIS_URL, var_dir=tmp / "var")
        token = manage(env, "create_access_key", "e2e-admin", "--admin").strip().splitlines()[-1]
        stack = Stack(env, tmp)
        try:
            url = stack.start_web(free_port())  # one process: python -m halfmoon.web
            auth = {"Authorization": f"Bearer {token}"}
            for path, body in [
                ("/api/v1/topics", {"name": "TranTest", "queue_nums": 4}),
                ("/api/v1/producer-groups", {"name": "G", "check_url": None}),
            ]:
                made = httpx.post(f"{url}{path}", json=body, headers=auth, timeout=10)
                assert made.status_code == 201, made.text
            yield url, token
            stack.check_alive()
        finally:
            stack.stop()


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def half_message(body: str) -> bytes:
    return json.dumps({"producer_group": "G", "topic": "TranTest", "body": body}).encode()


def assert_too_large(response: httpx.Response) -> dict:
    """413, the contract's error body with ``request_too_large`` and the limit, connection
    closed; returns the inner error."""
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["connection"] == "close"
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == "request_too_large"
    assert error["details"]["limit"] == LIMIT
    return error


def transaction_count(url: str, token: str) -> int:
    """How many transactions the broker holds (the paginated list's ``count``)."""
    listed = httpx.get(f"{url}/api/v1/transactions", headers=headers(token), timeout=10)
    assert listed.status_code == 200, listed.text
    return listed.json()["count"]


def test_a_chunked_half_message_is_stored_whole(broker) -> None:
    url, token = broker
    data = half_message("chunked order 42 paid " + "x" * 100_000)

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    sent = httpx.post(
        f"{url}/api/v1/transactions", content=pieces(), headers=headers(token), timeout=30
    )

    assert sent.request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in sent.request.headers
    assert sent.status_code == 201, sent.text
    got = httpx.get(
        f"{url}/api/v1/messages/{sent.json()['msg_id']}", headers=headers(token), timeout=10
    )
    assert got.status_code == 200, got.text
    assert got.json()["body"] == "chunked order 42 paid " + "x" * 100_000


def test_a_50_mib_upload_with_a_content_length_is_refused(broker) -> None:
    url, token = broker
    upload = b"{" + b" " * (UPLOAD - 1)

    started = time.monotonic()
    refused = httpx.post(
        f"{url}/api/v1/transactions", content=upload, headers=headers(token), timeout=60
    )
    elapsed = time.monotonic() - started

    error = assert_too_large(refused)
    assert error["details"]["size"] == UPLOAD
    assert elapsed < 20, elapsed
    assert healthy(url)


def test_a_50_mib_chunked_upload_is_refused_and_the_client_stops_early(broker) -> None:
    url, token = broker
    yielded = 0

    def upload() -> Iterator[bytes]:
        nonlocal yielded
        yield b'{"producer_group": "G", "topic": "TranTest", "body": "'
        while yielded < UPLOAD:
            yielded += PIECE
            yield b"y" * PIECE

    refused = httpx.post(
        f"{url}/api/v1/transactions", content=upload(), headers=headers(token), timeout=60
    )

    error = assert_too_large(refused)
    assert "size" not in error["details"]
    # The server closed the connection after its answer: the client's writes failed a few
    # socket buffers past the limit, far from the 50 MiB it meant to send.
    assert LIMIT < yielded < UPLOAD / 2, yielded
    assert healthy(url)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length, read from ``sock``."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before an answer: {raw!r}"
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    while len(body) < int(fields["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed in the middle of the answer"
        body += chunk
    return int(status_line.split()[1]), fields, body


def raw_request(url: str, token: str, extra: str) -> socket.socket:
    """A socket to the server that has sent the head of a POST /api/v1/transactions."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        (
            "POST /api/v1/transactions HTTP/1.1\r\n"
            f"Host: {host}\r\n"
            f"Authorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
            f"{extra}\r\n"
        ).encode()
    )
    return sock


def test_a_declared_50_mib_body_is_answered_before_a_byte_of_it_is_sent(broker) -> None:
    url, token = broker

    with raw_request(url, token, f"Content-Length: {UPLOAD}\r\n") as sock:
        status, fields, body = read_response(sock)
        assert sock.recv(1) == b""  # then the server closes the connection

    assert status == 413
    assert fields["connection"] == "close"
    assert json.loads(body)["error"]["details"] == {"limit": LIMIT, "size": UPLOAD}


def test_a_chunked_body_is_answered_once_it_passes_the_limit_while_the_client_waits(
    broker,
) -> None:
    url, token = broker
    sent = 0

    with raw_request(url, token, "Transfer-Encoding: chunked\r\n") as sock:
        while sent <= LIMIT:  # one byte past the limit, then nothing more: no final chunk
            sock.sendall(b"%x\r\n" % PIECE + b"z" * PIECE + b"\r\n")
            sent += PIECE
        status, fields, body = read_response(sock)

    assert status == 413, body
    assert json.loads(body)["error"]["details"] == {"limit": LIMIT}
    assert healthy(url)
    # Nothing of the refused uploads was stored: only the chunked half message of the first test.
    assert transaction_count(url, token) == 1
