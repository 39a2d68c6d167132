"""End to end: Halfmoon's own alerts with real broker processes. uvicorn, a Celery worker and
Celery beat run with an alert evaluation every second; through the HTTP API a producer group
gets a closed check endpoint, an alert rule watches it and a transaction waits for its checks.
Beat's alert task (``tasks.alerts.alerts_tick``, run by the worker) fires the alert and a real
local webhook receiver is told once; the check URL is then pointed at a live producer, which
commits the transaction, and the receiver is told once that the alert resolved, and nothing
more over the next evaluations."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import redis

from tests.e2e.processes import Stack, broker_env, free_port, manage
from tests.e2e.session import migrated_database
from tests.support import answer_state, check_server_running, closed_port_url, expected_signature

pytestmark = pytest.mark.e2e

PG_DATABASE = "halfmoon_e2e_alerts"
REDIS_URL = "redis://127.0.0.1:6379/14"
SETTINGS = {
    "HALFMOON_ALERT_EVALUATION_INTERVAL_MS": "1000",
    "HALFMOON_CHECK_SCAN_INTERVAL_MS": "1000",
    "HALFMOON_TRANSACTION_TIMEOUT_MS": "1000",
    "HALFMOON_TRANSACTION_CHECK_INTERVAL_MS": "1000",
    "HALFMOON_CHECK_UNDELIVERED_BACKOFF_MS": "200",
}
WAIT_S = 45


def _bodies(server) -> list[tuple[str, str, str]]:  # noqa: ANN001 - a CheckServer
    return [
        (r.body["status"], r.body["alerts"][0]["labels"]["alertname"], r.body["receiver"])
        for r in server.received()
    ]


def test_beat_fires_and_resolves_an_alert_with_one_notification_each_way(tmp_path: Path) -> None:
    with redis.Redis.from_url(REDIS_URL) as r:
        r.flushdb()
    with (
        migrated_database(PG_DATABASE) as database_url,
        check_server_running(answer=lambda body: (200, {})) as hook,
    ):
        env = broker_env(
            database_url=database_url,
            redis_url=REDIS_URL,
            var_dir=tmp_path / "var",
            settings=SETTINGS,
        )
        admin = manage(env, "create_access_key", "e2e-admin", "--admin").split()[-1]
        producer = manage(env, "create_access_key", "e2e-p", "--producer-group", "G").split()[-1]
        secret = manage(
            env,
            "shell",
            "-c",
            "from broker.services.alerts.receivers import receiver_create; "
            f"print(receiver_create(name='hook', kind='alertmanager', url={hook.url!r}).secret)",
        ).split()[-1]
        stack = Stack(env, tmp_path)
        try:
            url = stack.start_broker(free_port())
            as_admin = httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30
            )
            as_producer = httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {producer}"}, timeout=30
            )
            assert as_admin.post("/api/v1/topics", json={"name": "TranTest"}).status_code == 201
            group = {"name": "G", "check_url": closed_port_url()}
            assert as_admin.post("/api/v1/producer-groups", json=group).status_code == 201
            rule = {"name": "g-down", "kind": "group_unreachable", "group": "G", "threshold": 2}
            assert as_admin.post("/api/v1/alert-rules", json=rule).status_code == 201
            half = {"producer_group": "G", "topic": "TranTest", "body": "order 1"}
            sent = as_producer.post("/api/v1/transactions", json=half)
            assert sent.status_code == 201, sent.text
            transaction_id = sent.json()["transaction_id"]

            stack.wait_until("the firing notification", lambda: len(hook.received()) >= 1, WAIT_S)
            assert _bodies(hook) == [("firing", "g-down", "hook")], stack.report()
            assert as_admin.get("/api/v1/alert-rules/g-down").json()["firing"] == 1

            with check_server_running(answer=answer_state("COMMIT_MESSAGE")) as live:
                patched = as_admin.patch("/api/v1/producer-groups/G", json={"check_url": live.url})
                assert patched.status_code == 200
                stack.wait_until(
                    "the resolved notification", lambda: len(hook.received()) >= 2, WAIT_S
                )
                time.sleep(3.5)  # three more evaluations: nothing more is sent

            assert _bodies(hook) == [
                ("firing", "g-down", "hook"),
                ("resolved", "g-down", "hook"),
            ], stack.report()
            for request in hook.received():
                assert request.headers["X-Halfmoon-Signature"] == expected_signature(
                    secret, request.raw
                )
            state = as_admin.get(f"/api/v1/transactions/{transaction_id}").json()["state"]
            assert state == "COMMITTED"
            assert as_admin.get("/api/v1/alert-rules/g-down").json()["firing"] == 0
        finally:
            stack.stop()
