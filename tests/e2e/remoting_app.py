"""A RocketMQ 4.x application run by tests/e2e/test_remoting_transactions.py: Apache's C++ client
through PyPI's ``rocketmq-client-python`` (its code unchanged), in the venv the test installs
(``python remoting_app.py <role> <name server> <topic> <group>``). It prints one JSON object
a line (``started``, ``sent``, ``check``, ``stopped``) and, for ``tx``, answers checks until its
stdin closes.

Roles: ``tx``: a TransactionMQProducer sends ten half messages "Hello RocketMQ <i>" whose local
transaction answers UNKNOWN; its checker answers by i % 3 (1 commit, 2 rollback, 0 unknown).
``send``: a Producer sends "plain-0" to "plain-2" (tag TagP, a user property).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rocketmq.client import Message, Producer, TransactionMQProducer, TransactionStatus

BY_REMAINDER = {
    1: TransactionStatus.COMMIT,
    2: TransactionStatus.ROLLBACK,
    0: TransactionStatus.UNKNOWN,
}


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def value_of(body: bytes | str) -> int:
    text = body.decode() if isinstance(body, bytes) else body
    return int(text.rsplit(" ", 1)[-1])


def checker(message: Any) -> TransactionStatus:
    value = value_of(message.body)
    emit(
        "check",
        value=value,
        topic=message.topic.decode() if isinstance(message.topic, bytes) else message.topic,
    )
    return BY_REMAINDER[value % 3]


def tx(name_server: str, topic: str, group: str) -> None:
    producer = TransactionMQProducer(group, checker)
    producer.set_name_server_address(name_server)
    producer.start()
    emit("started")
    for i in range(10):
        message = Message(topic)
        message.set_keys(f"key-{i}")
        message.set_tags("TagA")
        message.set_property("value", str(i))
        message.set_body(f"Hello RocketMQ {i}")
        result = producer.send_message_in_transaction(
            message, lambda msg, args: TransactionStatus.UNKNOWN, None
        )
        emit("sent", value=i, status=int(result.status), msg_id=result.msg_id, offset=result.offset)
    sys.stdin.read()  # answer checks until the test closes stdin
    producer.shutdown()
    emit("stopped")


def send(name_server: str, topic: str, group: str) -> None:
    producer = Producer(group)
    producer.set_name_server_address(name_server)
    producer.start()
    emit("started")
    for i in range(3):
        message = Message(topic)
        message.set_keys(f"plain-key-{i}")
        message.set_tags("TagP")
        message.set_property("userProp", f"v{i}")
        message.set_body(f"plain-{i}")
        result = producer.send_sync(message)
        emit("sent", value=i, status=int(result.status), msg_id=result.msg_id, offset=result.offset)
    producer.shutdown()
    emit("stopped")


if __name__ == "__main__":
    role, name_server, topic, group = sys.argv[1:5]
    {"tx": tx, "send": send}[role](name_server, topic, group)
