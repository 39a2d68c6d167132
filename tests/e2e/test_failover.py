"""The database's machine lost under a running broker: a pg_auto_failover formation of the
test's own (``tests.e2e.ha_cluster``: a monitor, a primary, a synchronous standby), the
broker's processes reaching it through a multi-host ``DATABASE_URL``.

- One round of ``bench/chaos.py --failover``: the primary's machine lost under load (3
  producers, 2 consumers), the standby promoted; nothing acknowledged lost or doubled, the
  rebuild finds no difference, no 5xx but 503s, and writes are accepted again within 30 s.
- Ambiguous outcomes across a failover, one of each, deterministically:
  - a commit whose answer the producer never saw is sent again after the failover and is
    applied once (one delivered message, received once);
  - a half message sent again with its msg id after the failover is stored once;
  - a back-check answered while no primary answers (the check endpoint loses the primary
    before answering COMMIT) is asked again after the failover, and the transaction commits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import psycopg
import pytest

from tests.e2e.ha_cluster import AutoFailoverCluster, pg_autoctl
from tests.e2e.processes import Stack, broker_env, chaos_run, free_port, manage
from tests.e2e.services import RedisServer, pg_bin
from tests.support import CheckServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        pg_bin() is None or pg_autoctl() is None,
        reason="pg_auto_failover is not installed (postgresql-15-auto-failover)",
    ),
]

TOPIC = "FailoverTopic"
GROUP = "FailoverProducers"
CONSUMERS = "FailoverConsumers"
T = TypeVar("T")
RECOVERY_S = 60.0  # the longest the broker may take to take writes again after a failover


def test_one_failover_round_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    figures, status, output = chaos_run(
        tmp_path, "--failover", "--rounds", "1", "--round-s", "10", "--producers", "3"
    )

    assert figures["rounds"] == 1 and figures["acked"] > 0, output
    zeros = {name: figures[name] for name in ("lost", "doubled", "rebuild_diffs", "api_5xx")}
    assert zeros == dict.fromkeys(zeros, 0), output
    assert figures["failover_max_s"] <= 30, output
    assert status == 0, output


@pytest.fixture
def cluster() -> Iterator[AutoFailoverCluster]:
    formation = AutoFailoverCluster(free_port(), (free_port(), free_port()))
    try:
        formation.start()
        yield formation
    finally:
        formation.remove()


def _until(what: str, predicate: Callable[[], T], timeout_s: float = RECOVERY_S) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_ambiguous_outcomes_across_a_failover_are_applied_once(
    cluster: AutoFailoverCluster, tmp_path: Path
) -> None:
    redis = RedisServer(free_port())
    redis.start()
    lost_primary = threading.Event()

    def answer(check: dict) -> tuple[int, dict]:
        # The first check of "checked-tx": the primary's machine is lost while the broker
        # waits for this answer, so the broker cannot store the COMMIT it is given.
        if check["transaction_id"] == "checked-tx" and not lost_primary.is_set():
            primary = cluster.primary()
            assert primary is not None
            cluster.lose_node(primary)
            lost_primary.set()
        if check["transaction_id"] == "sent-tx":
            return 200, {"state": "UNKNOW"}  # left PREPARED: its resend shows what is stored
        return 200, {"state": "COMMIT_MESSAGE"}

    checks = CheckServer(answer=answer)
    checks.start()
    env = broker_env(
        database_url=cluster.url(),
        redis_url=redis.url,
        var_dir=tmp_path / "var",
        settings={
            "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
            "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
            "HALFMOON_CHECK_SCAN_INTERVAL_MS": "1000",
        },
    )
    stack = Stack(env, tmp_path)
    try:
        manage(env, "migrate", "--noinput")
        token = manage(env, "create_access_key", "ha", "--admin").strip().splitlines()[-1]
        url = stack.start_broker(free_port())
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=15)
        assert api.post("/api/v1/topics", json={"name": TOPIC}).status_code == 201
        group = api.post("/api/v1/producer-groups", json={"name": GROUP, "check_url": checks.url})
        checks.secrets[GROUP] = group.json()["check_secret"]
        assert api.post("/api/v1/consumer-groups", json={"name": CONSUMERS}).status_code == 201

        def send(msg_id: str) -> httpx.Response:
            return api.post(
                "/api/v1/transactions",
                json={"producer_group": GROUP, "topic": TOPIC, "body": msg_id, "msg_id": msg_id},
            )

        def commit(transaction_id: str) -> httpx.Response:
            return api.post(
                f"/api/v1/transactions/{transaction_id}/end",
                json={"producer_group": GROUP, "action": "commit"},
            )

        # Acknowledged before the failover; the producers "never saw" these answers.
        assert send("sent-tx").status_code == 201
        assert send("committed-tx").status_code == 201
        assert commit("committed-tx").status_code == 200
        # Left to the back-check: its first check loses the primary.
        assert send("checked-tx").status_code == 201
        _until("the check that loses the primary", lost_primary.is_set)

        # Retried as a producer retries an answer it never got, until the promoted standby
        # takes writes: each is answered as what was stored before the failover.
        def answered(response_of: Callable[[], httpx.Response]) -> httpx.Response | None:
            try:
                response = response_of()
            except httpx.HTTPError:
                return None
            assert response.status_code < 500 or response.status_code == 503, response.text
            return response if response.status_code < 500 else None

        resent = _until("the resend answered", lambda: answered(lambda: send("sent-tx")))
        assert resent.status_code == 200, resent.text
        assert resent.json()["state"] == "PREPARED"
        recommitted = _until(
            "the commit answered", lambda: answered(lambda: commit("committed-tx"))
        )
        assert recommitted.status_code == 200 and recommitted.json()["state"] == "COMMITTED"

        # The back-check answered while no primary answered is asked again, and commits.
        def checked_committed() -> bool:
            got = answered(lambda: api.get("/api/v1/transactions/checked-tx"))
            return got is not None and got.json()["state"] == "COMMITTED"

        _until("checked-tx committed by a later back-check", checked_committed)
        asked = [r for r in checks.requests if r.body["transaction_id"] == "checked-tx"]
        assert len(asked) >= 2

        dsn = cluster.url(scheme="postgresql")
        with psycopg.connect(dsn) as conn:
            stored = dict(
                conn.execute(
                    "SELECT msg_id, count(*) FROM broker_message WHERE topic = %s GROUP BY msg_id",
                    [TOPIC],
                ).fetchall()
            )
            halves = conn.execute(
                "SELECT count(*) FROM broker_transaction WHERE transaction_id = 'sent-tx'"
            ).fetchone()
        assert stored == {"committed-tx": 1, "checked-tx": 1}
        assert halves == (1,)

        received: list[str] = []

        def received_both() -> bool:
            got = api.post(
                f"/api/v1/consumer-groups/{CONSUMERS}/receive",
                json={"topic": TOPIC, "max_messages": 32, "wait_ms": 500},
            )
            received.extend(m["msg_id"] for m in got.json()["messages"])
            return {"committed-tx", "checked-tx"} <= set(received)

        _until("both committed messages received", received_both)
        assert sorted(received) == ["checked-tx", "committed-tx"]
        done = manage(env, "rebuild_transactions", "--dry-run")
        assert "differences: 0" in done or "no difference" in done.lower(), done
    finally:
        stack.stop()
        checks.stop()
        redis.stop()
