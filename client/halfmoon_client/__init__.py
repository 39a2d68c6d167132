"""A Python client for Halfmoon's HTTP API v1, modelled on RocketMQ's Java client. It needs
only ``httpx`` and the standard library (no Django, nothing of the broker), so an application
that produces or consumes messages installs it alone: ``pip install ./client``.

- ``TransactionProducer`` (``producer``) mirrors RocketMQ's ``TransactionMQProducer``: send a
  half message, run the local transaction, end it, and answer back-checks, either by serving
  a small HTTP endpoint (``check_mode="serve"``, ``check_server``) or by long-polling the
  broker for check requests (``check_mode="poll"``, ``check_poller``). Batches (api-v1
  "Batches"): ``send_message_in_transaction_batch``, ``send_batch``, ``end_transactions``
  (``TransactionEnd``); with ``batch_linger_ms`` > 0, concurrent sends of several threads
  are gathered into batches (``batcher``).
- ``TransactionListener`` (``listener``) mirrors RocketMQ's ``TransactionListener``;
  ``LocalTransactionState`` (``states``) keeps RocketMQ's spelling (``UNKNOW``).
- ``SimpleConsumer`` (``consumer``) mirrors RocketMQ 5's SimpleConsumer: receive with an
  invisible duration, then ack.
- ``HalfmoonAdmin`` (``admin``) covers the operator endpoints the seed demo needs.
- ``signing``: the back-check signature, shared with the broker (which signs with it).
- ``examples.seed_demo``: RocketMQ's transaction example, runnable with
  ``python -m halfmoon_client.examples.seed_demo --url URL --token TOKEN``.

Every non-2xx answer raises ``HalfmoonError`` with the contract's error body and the HTTP
status; a broker that cannot be reached raises ``HalfmoonConnectionError`` (``status_code``
None). Times are integers in milliseconds unless a name ends in ``_s``.

Example::

    class Listener(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            save_order(arg)
            return LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg_view):
            return LocalTransactionState.COMMIT_MESSAGE if order_exists(msg_view.keys) else \\
                LocalTransactionState.ROLLBACK_MESSAGE

    with TransactionProducer(url, token, "G", Listener(), check_mode="poll") as producer:
        result = producer.send_message_in_transaction(Message("TranTest", "hello", tags="TagA"))
"""

from halfmoon_client.admin import HalfmoonAdmin
from halfmoon_client.check_server import CHECK_PATH
from halfmoon_client.consumer import SimpleConsumer
from halfmoon_client.errors import HalfmoonConnectionError, HalfmoonError
from halfmoon_client.listener import CheckCallback, TransactionListener
from halfmoon_client.messages import Message, MessageView, SendResult, TransactionSendResult
from halfmoon_client.producer import TransactionProducer
from halfmoon_client.signing import SIGNATURE_HEADER, sign_check_body, signature_valid
from halfmoon_client.states import LocalTransactionState
from halfmoon_client.transport import TransactionEnd

__version__ = "0.1.0"

__all__ = [
    "CHECK_PATH",
    "SIGNATURE_HEADER",
    "CheckCallback",
    "HalfmoonAdmin",
    "HalfmoonConnectionError",
    "HalfmoonError",
    "LocalTransactionState",
    "Message",
    "MessageView",
    "SendResult",
    "SimpleConsumer",
    "TransactionEnd",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "sign_check_body",
    "signature_valid",
]
