"""What a back-check carries (api-v1 "Back-check: broker to producer") and what came of it.

``check_payload`` is the JSON body of a check, the same whether it is POSTed to the producer's
``check_url`` or handed to a producer that polls; ``CheckJob`` is one signed POST to send;
``CheckOutcome`` is what the producer answered (RocketMQ ``LocalTransactionState``) or what
became of the request.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from broker.constants import RESERVED_PROPERTIES
from broker.models import Message, Transaction
from broker.rules.states import CheckAnswer, EndAction, answer_of_action


def check_payload(tx: Transaction, half: Message, check_times: int) -> dict[str, Any]:
    """The back-check body of api-v1: the half message as the producer sent it, with
    ``check_times`` counting this check (1 on the first). A text body goes as ``body``, any
    other as ``body_base64``; reserved (broker) properties are left out."""
    user_props = {k: v for k, v in half.properties.items() if k not in RESERVED_PROPERTIES}
    payload: dict[str, Any] = {
        "transaction_id": tx.transaction_id,
        "msg_id": tx.transaction_id,
        "producer_group": tx.producer_group,
        "topic": tx.topic,
        "tags": tx.tags,
        "keys": tx.keys,
        "properties": user_props,
        "check_times": check_times,
        "commit_log_offset": tx.half_commit_log_offset,
        "half_queue_offset": tx.half_queue_offset,
        "born_timestamp": tx.born_timestamp,
    }
    body = bytes(half.body)
    if half.body_is_text:
        payload["body"] = body.decode("utf-8")
    else:
        payload["body_base64"] = base64.b64encode(body).decode("ascii")
    return payload


@dataclass(frozen=True)
class CheckJob:
    """One back-check to send; ``check_times`` counts this check.

    ``channel`` ``http``: a POST to ``check_url`` of ``body``, the raw JSON (``check_payload``)
    that ``signature`` signs (``X-Halfmoon-Signature``). ``channel`` ``telemetry``: a half
    message sent over gRPC, written on a RocketMQ client's telemetry stream
    (``broker.services.checks.telemetry``): ``client_id`` is the client that sent it,
    ``topic`` its real topic, ``commit_log_offset`` the half message's.
    """

    transaction_id: str
    producer_group: str
    check_times: int
    check_url: str = ""
    signature: str = ""
    body: bytes = b""
    channel: str = "http"
    client_id: str = ""
    topic: str = ""
    commit_log_offset: int = 0


@dataclass(frozen=True)
class CheckOutcome:
    """What came of one CheckJob.

    ``delivered`` is False only when the request never reached the producer (connection
    refused, connect timeout, a target refused by ``broker.rules.check_targets``, whose rule
    is ``refused``): such a check is not counted. ``action`` is commit, rollback or
    unknown (UNKNOW, a timeout after sending, any other answer), or None for 202 Accepted
    (the producer will call end with from_transaction_check=true).
    """

    job: CheckJob
    delivered: bool
    action: EndAction | None
    status_code: int | None = None
    error: str = ""
    answer: str = ""  # a CheckAnswer: COMMIT_MESSAGE, ..., ACCEPTED, TIMEOUT or INVALID
    timed_out: bool = False
    latency_ms: int | None = None  # request to answer (ms), for an answered check
    refused: str = ""  # the check-target rule that stopped it (broker.rules.check_targets)
    client_id: str = ""  # telemetry: the gRPC client the check was written to

    @property
    def label(self) -> str:
        """What the producer answered, as recorded in the check journal and the metrics."""
        if self.answer:
            return self.answer
        if self.action is None:
            return CheckAnswer.ACCEPTED
        return answer_of_action(self.action)
