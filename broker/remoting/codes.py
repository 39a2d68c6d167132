"""RocketMQ 4.x remoting request and response codes (Java ``RequestCode``, ``ResponseCode``)."""

from __future__ import annotations

SEND_MESSAGE = 10
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
END_TRANSACTION = 37
CHECK_TRANSACTION_STATE = 39
GET_ROUTEINFO_BY_TOPIC = 105
SEND_MESSAGE_V2 = 310

SUCCESS = 0
SYSTEM_ERROR = 1
REQUEST_CODE_NOT_SUPPORTED = 3
MESSAGE_ILLEGAL = 13
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17

NO_RESPONSE = frozenset({END_TRANSACTION})
"""Requests never answered, whatever their flag: the cpp client sends END_TRANSACTION with flag
0 and waits for nothing (Java sends it oneway)."""
