"""The services underneath fail under load: Redis stopped and started, and
PostgreSQL stopped and started, while producers send and end transactions through a real
broker (uvicorn, a Celery worker and beat: ``tests.e2e.processes.Stack``).

Each test stops a server of its own (``tests.e2e.services``), so nothing else on the machine
is touched: a Redis server on a free port, or a PostgreSQL cluster made by ``initdb``.

What is proved:
- Redis away: sends and ends still answer 201 and 200, each within ``ANSWER_S`` (events, the
  check rate limit and the Op flush trigger degrade and say so in the log); ``/healthz`` says
  503; when Redis is back, a transaction left PREPARED while it was away is back-checked and
  committed, with no restart of any process.
- PostgreSQL away: every API request answers 503 with the contract's error body
  (``service_unavailable``) within ``ANSWER_S``, never a 500; when it is back, the same processes
  answer again and every transaction acknowledged before (201, then 200) is there, committed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import Stack, broker_env, free_port, manage
from tests.e2e.services import PrivatePostgres, RedisServer, pg_bin
from tests.e2e.session import migrated_database
from tests.support import CheckServer, answer_state

pytestmark = pytest.mark.e2e

ANSWER_S = 10.0  # the longest any request may take while a service is away
TOPIC = "FaultTopic"
GROUP = "FaultGroup"
SETTINGS = {
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "0",  # due for a check as soon as stored
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_CHECK_SCAN_INTERVAL_MS": "1000",
    "HALFMOON_LOG_LEVEL": "INFO",
}


def _admin_token(env: dict[str, str]) -> str:
    return manage(env, "create_access_key", "fault-admin", "--admin").strip().splitlines()[-1]


def _send(client: httpx.Client) -> httpx.Response:
    return client.post(
        "/api/v1/transactions", json={"producer_group": GROUP, "topic": TOPIC, "body": "fault"}
    )


def _end(client: httpx.Client, transaction_id: str, action: str = "commit") -> httpx.Response:
    return client.post(
        f"/api/v1/transactions/{transaction_id}/end",
        json={"producer_group": GROUP, "action": action},
    )


def _timed(call: object, *args: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call(*args)  # type: ignore[operator]
    return response, time.monotonic() - started


def _seed(client: httpx.Client, check_url: str | None) -> str:
    """Create ``TOPIC`` and ``GROUP`` (back-checked at ``check_url``); returns its check secret."""
    assert client.post("/api/v1/topics", json={"name": TOPIC, "queue_nums": 2}).status_code == 201
    created = client.post("/api/v1/producer-groups", json={"name": GROUP, "check_url": check_url})
    assert created.status_code == 201, created.text
    return created.json()["check_secret"]


@contextmanager
def _broker(
    database_url: str, redis_url: str, tmp_path: Path, *, migrate: bool = True
) -> Iterator[tuple[Stack, httpx.Client]]:
    """The broker's processes on a free port, on a database migrated here (``migrate``) or
    already, and an admin's API client."""
    env = broker_env(
        database_url=database_url, redis_url=redis_url, var_dir=tmp_path, settings=SETTINGS
    )
    if migrate:
        manage(env, "migrate", "--noinput")
    token = _admin_token(env)
    stack = Stack(env, tmp_path)
    try:
        url = stack.start_broker(free_port())
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            yield stack, client
    finally:
        stack.stop()


def test_redis_away_sends_and_ends_still_work_and_checks_resume(tmp_path: Path) -> None:
    redis_server = RedisServer(free_port())
    redis_server.start()
    try:
        with (
            migrated_database("halfmoon_faults_redis") as database_url,
            CheckServer(answer=answer_state("COMMIT_MESSAGE")) as checks,
            _broker(database_url, redis_server.url, tmp_path, migrate=False) as (stack, client),
        ):
            checks.secrets[GROUP] = _seed(client, checks.url)
            redis_server.stop()
            assert client.get("/healthz", timeout=ANSWER_S).status_code == 503

            committed = []
            for _ in range(5):
                sent, took = _timed(_send, client)
                assert sent.status_code == 201 and took < ANSWER_S, (sent.text, took)
                ended, took = _timed(_end, client, sent.json()["transaction_id"])
                assert ended.status_code == 200 and took < ANSWER_S, (ended.text, took)
                assert ended.json()["state"] == "COMMITTED"
                committed.append(sent.json()["transaction_id"])
            # Left to the back-check, which cannot be scheduled while Redis is away.
            left, took = _timed(_send, client)
            assert left.status_code == 201 and took < ANSWER_S, (left.text, took)
            left_id = left.json()["transaction_id"]
            # The feed's events go out from a publisher thread after a short linger: its first
            # failed publish, and its warning, may come some time after the sends answered.
            stack.wait_until(
                "the web process saying the feed's events are dropped",
                lambda: "events are dropped while the channel layer (Redis)" in stack.web_logs(),
                timeout_s=30,
            )

            redis_server.start()
            # Celery's worker dies when Redis goes away while it holds an unacknowledged task
            # (kombu restores the task over the connection it just lost: "Unrecoverable error:
            # AttributeError", kombu issue 582); in deployment supervisord starts it again
            # (autorestart), so does this test. Nothing is lost: beat sends the scans again.
            if (died := stack.restart_exited("worker")) is not None:
                assert "Unrecoverable error" in died.read_text(errors="replace"), stack.report()
            stack.wait_until(
                "the /healthz after Redis came back",
                lambda: client.get("/healthz", timeout=5).status_code == 200,
            )
            stack.wait_until(
                "the back-check of the transaction left PREPARED while Redis was away",
                lambda: (
                    client.get(f"/api/v1/transactions/{left_id}").json()["state"] == "COMMITTED"
                ),
                timeout_s=120,
            )
            assert left_id in checks.received_ids()
            for transaction_id in committed:
                got = client.get(f"/api/v1/transactions/{transaction_id}").json()
                assert got["state"] == "COMMITTED", got
            web_log = stack.web_logs()
            assert "events are dropped while the channel layer (Redis)" in web_log, stack.report()
            assert "Internal Server Error" not in web_log, stack.report()
    finally:
        redis_server.stop()


@pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL's initdb is not installed")
def test_postgres_away_answers_503_and_comes_back(tmp_path: Path) -> None:
    postgres = PrivatePostgres(free_port())
    redis_server = RedisServer(free_port())
    try:
        postgres.init()
        postgres.start()
        database_url = postgres.create_database("halfmoon")
        redis_server.start()
        with _broker(database_url, redis_server.url, tmp_path) as (stack, client):
            _seed(client, None)
            acknowledged = []
            for _ in range(5):
                sent = _send(client)
                assert sent.status_code == 201, sent.text
                transaction_id = sent.json()["transaction_id"]
                assert _end(client, transaction_id).status_code == 200
                acknowledged.append(transaction_id)

            postgres.stop()
            for call, args in (
                (_send, (client,)),
                (_end, (client, acknowledged[0])),
                (client.get, (f"/api/v1/transactions/{acknowledged[0]}",)),
                (client.get, ("/api/v1/topics",)),
            ):
                for _ in range(2):  # the first use of a dead connection, then a new one
                    response, took = _timed(call, *args)
                    assert response.status_code == 503, (response.status_code, response.text)
                    assert took < ANSWER_S, took
                    assert response.json()["error"]["code"] == "service_unavailable"

            postgres.start()
            stack.wait_until(
                "the API after PostgreSQL came back",
                lambda: _send(client).status_code == 201,
                timeout_s=30,
            )
            for transaction_id in acknowledged:
                got = client.get(f"/api/v1/transactions/{transaction_id}")
                assert got.status_code == 200 and got.json()["state"] == "COMMITTED", got.text
            assert "Internal Server Error" not in stack.web_logs()
    finally:
        postgres.remove()
        redis_server.stop()
