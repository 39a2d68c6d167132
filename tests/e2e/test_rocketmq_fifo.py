"""End to end: FIFO message groups with RocketMQ's official Python client
(``rocketmq-python-client`` 5.1.2, unchanged; tests/e2e/rocketmq_app.py) against real broker
processes started as the README says (web, Celery worker and beat, the gRPC server).

1. a FIFO producer sends three message groups of 20 messages each; a FIFO PushConsumer (its
   consumer group ``fifo``, so the settings answer ``subscription.fifo`` and the client
   consumes each group in order) whose listener fails the 5th message of one group twice
   receives every group in send order, that group's 6th message only after its 5th succeeded,
   and the other groups not held back meanwhile;
2. across protocols: messages of two groups sent over HTTP (``message_group``) reach a gRPC
   SimpleConsumer of a FIFO consumer group as FIFO messages, each group in send order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import redis
from rocketmq.grpc_protocol import definition_pb2

from tests.e2e.processes import Stack, broker_env, free_port, manage
from tests.e2e.test_rocketmq_clients import Halfmoon, exited, exited_early, last_line

pytestmark = pytest.mark.e2e

DATABASE = os.environ.get("HALFMOON_TEST_DATABASE", "test_halfmoon") + "_rocketmq_fifo"
TOPICS = ("FifoTopic", "CrossFifoTopic")
CONSUMER_GROUPS = ("FifoConsumers", "CrossFifoConsumers")
GROUPS = ("g0", "g1", "g2")
PER_GROUP = 20
FAILING_GROUP, FAILING_NTH = 1, 5
"""The listener fails the 5th message of g1 (its index in the send, 0-based: 4 * 3 + 1) twice."""
FIFO = definition_pb2.MessageType.FIFO


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory,
    migrated_database: Callable[[str], AbstractContextManager[str]],
    static_files: Callable[[Path], None],
) -> Iterator[Halfmoon]:
    """The README's processes on a database and Redis database of this file's own, with an
    admin key holding a SecretKey, this file's topics and FIFO consumer groups."""
    tmp = tmp_path_factory.mktemp("rocketmq-fifo")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()
    with migrated_database(DATABASE) as database_url:
        env = broker_env(database_url=database_url, redis_url=redis_url, var_dir=tmp / "var")
        static_files(tmp / "var")
        admin_token = last_line(manage(env, "create_access_key", "e2e-admin", "--admin"))
        admin_secret = last_line(manage(env, "access_key_secret", "e2e-admin"))
        stack = Stack(env, tmp)
        hm = Halfmoon(stack, tmp, "", database_url, admin_token, admin_secret, admin_secret)
        try:
            hm.url = stack.start_broker(free_port())
            for topic in TOPICS:
                assert hm.api("POST", "/topics", json={"name": topic}).status_code == 201
            for group in CONSUMER_GROUPS:
                body = {"name": group, "fifo": True, "max_delivery_attempts": 5}
                answer = hm.api("POST", "/consumer-groups", json=body)
                assert answer.status_code == 201, answer.text
            yield hm
        finally:
            for client in hm.clients:
                client.kill()
            stack.stop()


def test_a_fifo_push_consumer_keeps_each_groups_order_through_a_failing_message(
    broker: Halfmoon,
) -> None:
    hm = broker
    failing_index = (FAILING_NTH - 1) * len(GROUPS) + FAILING_GROUP
    next_index = failing_index + len(GROUPS)
    failing_body, next_body = f"fifo {failing_index}", f"fifo {next_index}"
    consumer = hm.client("fifo-push", "push", "--group", "FifoConsumers", "--topic", "FifoTopic",
                         "--result", "success", "--fail-body", failing_body,
                         "--fail-times", "2")  # fmt: skip
    hm.started(consumer)
    total = PER_GROUP * len(GROUPS)
    producer = hm.client("fifo-producer", "producer", "--topic", "FifoTopic", "--send",
                         str(total), "--message-groups", ",".join(GROUPS),
                         "--body-prefix", "fifo")  # fmt: skip
    hm.wait("the FIFO sends", lambda: len(producer.of("sent")) == total or exited_early(producer))

    def succeeded() -> list[dict]:
        return [e for e in consumer.of("consumed") if e["result"] == "success"]

    hm.wait("every message consumed", lambda: len(succeeded()) >= total or exited(consumer))
    report = hm.report()
    events = consumer.of("consumed")
    sent = producer.of("sent")
    assert [e["message_group"] for e in sent] == [GROUPS[i % 3] for i in range(total)], report
    # Each message succeeded once; each group's successes came in send order.
    assert sorted(e["body"] for e in succeeded()) == sorted(f"fifo {i}" for i in range(total))
    for n, group in enumerate(GROUPS):
        bodies = [e["body"] for e in succeeded() if e["message_group"] == group]
        assert bodies == [f"fifo {i}" for i in range(n, total, 3)], (group, report)
        # ... and so did every hand-out of the group: nothing of it before its predecessor.
        handed = [int(e["body"].split()[1]) for e in events if e["message_group"] == group]
        assert handed == sorted(handed), (group, report)
    # The failing message: twice FAILURE, then SUCCESS; the group's next one only after that.
    position = {id(e): n for n, e in enumerate(events)}
    tries = [e for e in events if e["body"] == failing_body]
    assert [e["result"] for e in tries] == ["failure", "failure", "success"], report
    [following] = [e for e in events if e["body"] == next_body]
    assert position[id(following)] > position[id(tries[-1])], report
    # The other groups were not held back while it was being retried.
    during = events[position[id(tries[0])] + 1 : position[id(tries[-1])]]
    for n, group in enumerate(GROUPS):
        if n != FAILING_GROUP:
            assert any(e["message_group"] == group for e in during), (group, report)
    assert consumer.terminate() == 0, consumer.report()


def test_an_http_fifo_producer_and_a_grpc_consumer(broker: Halfmoon) -> None:
    hm = broker
    bodies = {"h1": [f"h1 step {i}" for i in range(5)], "h2": [f"h2 step {i}" for i in range(5)]}
    for i in range(5):
        for group in ("h1", "h2"):
            answer = hm.api(
                "POST",
                "/messages",
                json={"topic": "CrossFifoTopic", "body": bodies[group][i], "message_group": group},
            )
            assert answer.status_code == 201, answer.text
    waiting = hm.client("cross-fifo-consumer", "simple", "--group", "CrossFifoConsumers",
                        "--topic", "CrossFifoTopic", "--count", "10")  # fmt: skip
    assert waiting.proc.wait(timeout=120) == 0, waiting.report()
    waiting._reader.join(timeout=5)
    report = hm.report()
    received = waiting.of("received")
    assert {e["message_type"] for e in received} == {FIFO}, report
    for group, expected in bodies.items():
        got = [e["body"] for e in received if e["message_group"] == group]
        assert got == expected, (group, report)
