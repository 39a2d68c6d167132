"""A Python client for Halfmoon's HTTP API v1, modelled on RocketMQ's Java client; it needs
only ``httpx`` (no Django, nothing of the broker): ``pip install ./client``.

- ``TransactionProducer`` (``producer``): RocketMQ's ``TransactionMQProducer``, with batches
  (``batcher``) and back-checks served (``check_server``) or long-polled (``check_poller``);
- ``TransactionListener`` (``listener``), ``LocalTransactionState`` (``states``, ``UNKNOW``);
- ``SimpleConsumer`` (``consumer``): RocketMQ 5's SimpleConsumer, receive then ack, with a
  ``FilterExpression`` (``filters``: TAG or SQL92, applied by the broker);
- ``HalfmoonAdmin`` (``admin``): the operator endpoints the seed demo needs;
- ``signing``: the back-check signature, shared with the broker;
- ``examples.seed_demo``: RocketMQ's transaction example.

Every non-2xx answer raises ``HalfmoonError`` (the contract's error body, the HTTP status); an
unreachable broker ``HalfmoonConnectionError``. Times are integers in ms unless a name ends in
``_s``. Usage and an example: client/README.md.
"""

from halfmoon_client.admin import HalfmoonAdmin
from halfmoon_client.check_server import CHECK_PATH
from halfmoon_client.consumer import SimpleConsumer
from halfmoon_client.errors import HalfmoonConnectionError, HalfmoonError
from halfmoon_client.filters import SUB_ALL, FilterExpression, FilterExpressionType
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
    "SUB_ALL",
    "CheckCallback",
    "FilterExpression",
    "FilterExpressionType",
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
