"""End to end: delay messages and recall with RocketMQ's official Python client
(``rocketmq-python-client`` 5.1.2, unchanged; tests/e2e/rocketmq_app.py) against real broker
processes started as the README says (web, Celery worker and beat, the gRPC server) plus the
timer ``python -m halfmoon.timer`` (deploy/supervisord.conf's ``timer``, which
``Stack.start_broker`` does not start).

1. a message sent with a 3 s delay reaches a waiting SimpleConsumer as DELAY with its delivery
   timestamp, never before that time, and within 1 s after it: judged by the broker's own
   times (the delivered copy's store time, the delivery journal's hand-out time) and the
   client's decode time, not by the test's sleeps;
2. a delay message recalled right after its send is never delivered: a witness sent after it
   with the same delay (so due later) arrives, and the recalled one does not;
3. a recall after the due time is refused (PRECONDITION_FAILED, 42800) and the message is
   delivered;
4. across protocols: a delay message sent over gRPC reaches a consumer long-polling over HTTP
   (``POST .../receive``) not before its time and within 1 s after it;
5. in Chromium (Playwright, Debian's ``/usr/bin/chromium``), an operator finds a scheduled
   message on the console's "Scheduled messages" page and recalls it with a reason: the audit
   log shows it, and it is never delivered while a witness scheduled with it is. The two are
   scheduled an hour ahead (no race with the browser's pace) and, once recalled, their due
   times are brought to now in the database: the timer finds them at its next read.

The Python client writes its millisecond ``delivery_timestamp`` into the protobuf Timestamp's
``seconds``; these tests send exactly that.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from rocketmq.grpc_protocol import Code, definition_pb2

from tests.e2e.console_stack import shot
from tests.e2e.processes import (
    Stack,
    broker_env,
    chromium_launch,
    console_sign_in,
    free_port,
    manage,
)
from tests.e2e.test_rocketmq_clients import Client, Halfmoon, exited, exited_early, last_line

pytestmark = pytest.mark.e2e

DATABASE = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_rocketmq_delay"
DELAY_MS = 3000
ON_TIME_MS = 1000
"""How late after its due time a delay message is stored on its topic and handed out (issue 38:
"received within 1 s after it"), judged on the median of ``ON_TIME_SENDS`` messages so that one
message held up by a loaded CI machine (1.35 s seen there once) does not decide it."""
LATE_BOUND_MS = 2500
"""How late any one delay message may be: half the timer's idle recheck (``HELD_RECHECK_S``,
5 s), so a timer that missed its due time and woke on the recheck fails."""
ON_TIME_SENDS = 3
TOPICS = ("DelayTopic", "RecallTopic", "LateRecallTopic", "CrossTopic", "ConsoleTopic")
CONSUMER_GROUPS = (
    "DelayConsumers",
    "RecallConsumers",
    "LateRecallConsumers",
    "CrossConsumers",
    "ConsoleConsumers",
)
OPERATOR, PASSWORD = "olga", "delay-browser-pw"
"""The console's operator of the browser test."""
DELAY = definition_pb2.MessageType.DELAY


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory,
    migrated_database: Callable[[str], AbstractContextManager[str]],
    static_files: Callable[[Path], None],
) -> Iterator[Halfmoon]:
    """The README's processes and the timer, on a database and Redis database of this file's
    own (the worker's ``REDIS_URL``, emptied first), with an admin key holding a SecretKey,
    this file's topics and consumer groups, and a console operator."""
    tmp = tmp_path_factory.mktemp("rocketmq-delay")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()
    with migrated_database(DATABASE) as database_url:
        env = broker_env(database_url=database_url, redis_url=redis_url, var_dir=tmp / "var")
        static_files(tmp / "var")
        admin_token = last_line(manage(env, "create_access_key", "e2e-admin", "--admin"))
        admin_secret = last_line(manage(env, "access_key_secret", "e2e-admin"))
        manage(env, "create_console_user", OPERATOR, "--role", "operator", "--password", PASSWORD)
        stack = Stack(env, tmp)
        hm = Halfmoon(stack, tmp, "", database_url, admin_token, admin_secret, admin_secret)
        try:
            hm.url = stack.start_broker(free_port())
            stack.start("timer", "-m", "halfmoon.timer")
            for topic in TOPICS:
                assert hm.api("POST", "/topics", json={"name": topic}).status_code == 201
            for group in CONSUMER_GROUPS:
                answer = hm.api("POST", "/consumer-groups", json={"name": group})
                assert answer.status_code == 201, answer.text
            yield hm
        finally:
            for client in hm.clients:
                client.kill()
            stack.stop()


def consumer(hm: Halfmoon, name: str, group: str, topic: str, *extra: str) -> Client:
    """A started SimpleConsumer of ``group`` on ``topic`` (long polling 5 s)."""
    started = hm.client(name, "simple", "--group", group, "--topic", topic, *extra)
    hm.started(started)
    return started


def stored_copy(hm: Halfmoon, topic: str, msg_id: str) -> list[tuple[int]]:
    """The store times (ms) of ``msg_id``'s messages on ``topic`` (the timer's copies)."""
    return hm.sql(
        "SELECT store_timestamp FROM broker_message WHERE topic = %s AND msg_id = %s",
        topic,
        msg_id,
    )


def handed_out(hm: Halfmoon, group: str, msg_id: str) -> list[tuple[int]]:
    """When the broker handed ``msg_id`` to ``group`` (the delivery journal, ms)."""
    return hm.sql(
        "SELECT timestamp FROM broker_deliveryevent"
        " WHERE consumer_group = %s AND msg_id = %s AND kind = 'delivered'",
        group,
        msg_id,
    )


def test_a_delay_message_arrives_at_its_time_not_before(broker: Halfmoon) -> None:
    hm = broker
    waiting = consumer(hm, "delay-consumer", "DelayConsumers", "DelayTopic",
                       "--count", str(ON_TIME_SENDS))  # fmt: skip
    producer = hm.client("delay-producer", "producer", "--topic", "DelayTopic",
                         "--send", str(ON_TIME_SENDS), "--delay-ms", str(DELAY_MS),
                         "--body-prefix", "in 3 s")  # fmt: skip
    hm.wait(
        "the delay sends",
        lambda: len(producer.of("sent")) == ON_TIME_SENDS or exited_early(producer),
    )
    sent = producer.of("sent")
    assert len(sent) == ON_TIME_SENDS, producer.report()
    for one in sent:
        assert one["recall_handle"], producer.report()
        rows = hm.sql(
            "SELECT state, delivery_timestamp, topic FROM broker_scheduledmessage "
            "WHERE msg_id = %s",
            one["message_id"],
        )
        due = one["delivery_timestamp"]
        assert rows in ([("SCHEDULED", due, "DelayTopic")], [("DELIVERED", due, "DelayTopic")])

    hm.wait(
        "the delay messages",
        lambda: len(waiting.of("received")) == ON_TIME_SENDS or exited(waiting),
    )
    report = hm.report()
    received = {m["message_id"]: m for m in waiting.of("received")}
    assert sorted(received) == sorted(m["message_id"] for m in sent), report
    late: list[int] = []  # how late each was handed out (ms after its due time)
    for i, one in enumerate(sent):
        due, got = one["delivery_timestamp"], received[one["message_id"]]
        assert (got["body"], got["message_type"]) == (f"in 3 s {i}", DELAY), report
        assert got["delivery_timestamp"] == due, report
        # Never before its time: the broker's own clock (the copy on the topic is stored at
        # its due time or later), then the client's. The delivery journal stamps a receive
        # when its read starts, so it may precede the copy's store time by that read.
        [(stored,)] = stored_copy(hm, "DelayTopic", one["message_id"])
        [(handed,)] = handed_out(hm, "DelayConsumers", one["message_id"])
        assert due <= stored < due + LATE_BOUND_MS, (due, stored, report)
        assert handed < due + LATE_BOUND_MS, (due, handed, report)
        assert got["received_ms"] >= due, (due, got, report)
        assert one["sent_ms"] < due, one  # the consumer was waiting while it was scheduled
        delivered = hm.sql(
            "SELECT state, ended_timestamp FROM broker_scheduledmessage WHERE msg_id = %s",
            one["message_id"],
        )
        assert delivered == [("DELIVERED", stored)], report
        late.append(max(stored, handed) - due)
    assert sorted(late)[len(late) // 2] < ON_TIME_MS, (late, report)
    assert waiting.proc.wait(timeout=30) == 0, waiting.report()


def test_a_recalled_delay_message_is_never_delivered(broker: Halfmoon) -> None:
    hm = broker
    waiting = consumer(hm, "recall-consumer", "RecallConsumers", "RecallTopic",
                       "--count", "1", "--idle-s", "2")  # fmt: skip
    recalling = hm.client("recalling-producer", "producer", "--topic", "RecallTopic",
                          "--send", "1", "--delay-ms", str(DELAY_MS), "--recall",
                          "--body-prefix", "recalled")  # fmt: skip
    hm.wait("the recall", lambda: bool(recalling.of("recalled")) or exited_early(recalling))
    recalled = recalling.one("recalled")
    recalled_id = recalling.one("sent")["message_id"]
    assert recalled["recalled_id"] == recalled_id, recalling.report()
    # A witness with the same delay, sent after the recall: due later than the recalled one,
    # so by its arrival the recalled one's time has passed.
    witness = hm.client("witness-producer", "producer", "--topic", "RecallTopic", "--send", "1",
                        "--delay-ms", str(DELAY_MS), "--body-prefix", "witness")  # fmt: skip
    hm.wait("the witness's send", lambda: bool(witness.of("sent")) or exited_early(witness))
    witness_id = witness.one("sent")["message_id"]
    assert waiting.proc.wait(timeout=60) == 0, waiting.report()
    waiting._reader.join(timeout=5)
    report = hm.report()

    assert [e["message_id"] for e in waiting.of("received")] == [witness_id], report
    assert stored_copy(hm, "RecallTopic", recalled_id) == [], report
    assert not handed_out(hm, "RecallConsumers", recalled_id), report
    state = hm.sql(
        "SELECT state, recalled_by FROM broker_scheduledmessage WHERE msg_id = %s", recalled_id
    )
    client_id = recalling.one("started")["client_id"]
    assert state == [("RECALLED", f"grpc:{client_id}")], report


def test_a_recall_after_the_due_time_is_refused(broker: Halfmoon) -> None:
    hm = broker
    waiting = consumer(hm, "late-consumer", "LateRecallConsumers", "LateRecallTopic",
                       "--count", "1")  # fmt: skip
    late = hm.client("late-producer", "producer", "--topic", "LateRecallTopic", "--send", "1",
                     "--delay-ms", "2000", "--recall-late")  # fmt: skip
    hm.wait("the late recall", lambda: bool(late.of("recall_failed")) or exited_early(late))
    report = hm.report()
    refused = late.one("recall_failed")
    sent = late.one("sent")
    assert refused["asked_ms"] > sent["delivery_timestamp"], report
    assert refused["code"] == Code.PRECONDITION_FAILED, report
    assert "too late" in refused["message"], report
    assert not late.of("recalled"), report
    hm.wait("the message", lambda: bool(waiting.of("received")) or exited(waiting))
    assert waiting.one("received")["message_id"] == sent["message_id"], hm.report()
    assert waiting.proc.wait(timeout=30) == 0, waiting.report()


def receive_over_http(hm: Halfmoon, group: str, topic: str, wait_ms: int) -> list[dict[str, Any]]:
    """One long-polling ``POST /consumer-groups/{group}/receive`` of ``topic`` (admin key)."""
    answer = hm.api(
        "POST",
        f"/consumer-groups/{group}/receive",
        json={"topic": topic, "max_messages": 32, "wait_ms": wait_ms},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def test_a_grpc_delay_message_is_received_over_http_at_its_time(broker: Halfmoon) -> None:
    hm = broker
    assert receive_over_http(hm, "CrossConsumers", "CrossTopic", 0) == []  # the group's offsets
    producer = hm.client("cross-producer", "producer", "--topic", "CrossTopic", "--send", "1",
                         "--delay-ms", str(DELAY_MS), "--body-prefix", "over grpc")  # fmt: skip
    hm.wait("the delay send", lambda: bool(producer.of("sent")) or exited_early(producer))
    sent = producer.one("sent")
    due = sent["delivery_timestamp"]

    polls: list[tuple[int, int]] = []  # (asked, answered) ms of each empty long poll
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        asked = int(time.time() * 1000)
        got = receive_over_http(hm, "CrossConsumers", "CrossTopic", 10_000)
        if not got:
            polls.append((asked, int(time.time() * 1000)))
    answered = int(time.time() * 1000)
    report = hm.report()

    assert [(m["msg_id"], m["body"]) for m in got] == [(sent["message_id"], "over grpc 0")], report
    assert got[0]["properties"]["TIMER_DELIVER_MS"] == str(due), got
    assert answered >= due, (due, answered)  # the client's clock: not before its time
    assert sent["sent_ms"] < due, sent  # and the first long poll was asked before it
    [(stored,)] = stored_copy(hm, "CrossTopic", sent["message_id"])
    [(handed,)] = handed_out(hm, "CrossConsumers", sent["message_id"])
    assert got[0]["store_timestamp"] == stored
    assert due <= stored < due + LATE_BOUND_MS, (due, stored, report)
    assert handed < due + LATE_BOUND_MS, (due, handed, polls, report)  # stamped as its read began


def test_an_operator_recalls_a_scheduled_message_from_the_console(broker: Halfmoon) -> None:
    from playwright.sync_api import expect, sync_playwright

    hm = broker
    assert receive_over_http(hm, "ConsoleConsumers", "ConsoleTopic", 0) == []
    due = int(time.time() * 1000) + 3_600_000
    sends = [
        {"topic": "ConsoleTopic", "body": body, "keys": keys, "msg_id": msg_id, "deliver_at": due}
        for body, keys, msg_id in (
            ("cancel order 7", "order-7", "CANCEL-ORDER-7"),
            ("witness", "witness", "WITNESS-1"),
        )
    ]
    for body in sends:
        answer = hm.api("POST", "/messages", json=body)
        assert answer.status_code == 201 and answer.json()["state"] == "SCHEDULED", answer.text

    with sync_playwright() as playwright:
        chromium = chromium_launch(playwright)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 900})
            expect.set_options(timeout=10_000)
            console_sign_in(page, hm.url, OPERATOR, PASSWORD)
            page.get_by_role("link", name="Scheduled messages").click()
            page.locator('input[name="key"]').fill("order-7")
            page.get_by_role("button", name="Filter").click()
            rows = page.locator("#scheduled-results tbody tr")
            expect(rows).to_have_count(1)
            expect(rows).to_have_attribute("data-state", "SCHEDULED")
            shot(page, "scheduled-list")
            rows.get_by_role("link", name="CANCEL-ORDER-7").click()
            expect(page.locator("#scheduled-state")).to_have_text("SCHEDULED")
            page.locator('#recall-form textarea[name="reason"]').fill("order 7 was paid")
            page.get_by_role("button", name="Recall").click()
            expect(page.locator("#scheduled-state")).to_have_text("RECALLED")
            expect(page.locator("#recalled-by")).to_contain_text(f"console:{OPERATOR}")
            expect(page.locator("#scheduled-timeline li[data-kind=recalled]")).to_contain_text(
                "order 7 was paid"
            )
            expect(page.locator("#recall-form")).to_have_count(0)
            shot(page, "scheduled-recalled")
            page.get_by_role("link", name="Audit log").first.click()
            entry = page.locator("tbody tr", has_text="recall-message")
            expect(entry).to_contain_text("order 7 was paid")
            expect(entry).to_contain_text("CANCEL-ORDER-7")
        finally:
            chromium.close()

    # Both due now: the timer delivers the witness at its next read, never the recalled one.
    url = hm.database_url.replace("postgres://", "postgresql://", 1)
    with psycopg.connect(url) as conn:
        conn.execute(
            "UPDATE broker_scheduledmessage SET delivery_timestamp = %s WHERE topic = %s",
            (int(time.time() * 1000), "ConsoleTopic"),
        )
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        got = receive_over_http(hm, "ConsoleConsumers", "ConsoleTopic", 10_000)
    assert [m["msg_id"] for m in got] == ["WITNESS-1"], hm.report()
    assert receive_over_http(hm, "ConsoleConsumers", "ConsoleTopic", 0) == []
    assert stored_copy(hm, "ConsoleTopic", "CANCEL-ORDER-7") == []
    states = dict(hm.sql("SELECT msg_id, state FROM broker_scheduledmessage WHERE topic = %s", "ConsoleTopic"))  # fmt: skip
    assert states == {"CANCEL-ORDER-7": "RECALLED", "WITNESS-1": "DELIVERED"}
    audit = hm.sql("SELECT actor, via, reason FROM broker_auditentry WHERE action = 'recall-message'")  # fmt: skip
    assert audit == [(f"console:{OPERATOR}", "console", "order 7 was paid")]
