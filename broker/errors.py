"""The application's error hierarchy.

Each error carries the contract's ``code`` (snake_case), a one-sentence ``message``, optional
``details`` and the HTTP status it maps to; ``broker.api.exceptions.exception_handler`` renders
all of them as ``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

from typing import Any, Literal


class HalfmoonError(Exception):
    """Base of every error a service raises on purpose."""

    status_code = 400
    code = "invalid_input"

    def __init__(
        self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None
    ):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}


class InvalidInput(HalfmoonError):
    """400: a value breaks a rule of the contract (a bad action, a reserved property)."""

    status_code = 400
    code = "invalid_input"


class NotFound(HalfmoonError):
    """404: the named topic, group, message or transaction does not exist (or, for a message,
    is not the caller's to see). Services raise it through ``not_found``."""

    status_code = 404
    code = "not_found"


class Unauthorized(HalfmoonError):
    """401: the caller's credentials are refused (over gRPC: a bad ``MQv2-HMAC-SHA1``
    signature, an unknown access key, a key without a RocketMQ secret); gRPC answers it as
    RocketMQ's UNAUTHORIZED (40100)."""

    status_code = 401
    code = "unauthorized"


class Forbidden(HalfmoonError):
    """403: this access key may not do this (another producer group, a system topic)."""

    status_code = 403
    code = "permission_denied"


class Conflict(HalfmoonError):
    """409: the request contradicts the current state."""

    status_code = 409
    code = "conflict"


class TooLarge(HalfmoonError):
    """413: a body or the properties are over their size limit."""

    status_code = 413
    code = "too_large"


NotFoundKind = Literal[
    "topic",
    "producer_group",
    "consumer_group",
    "message",
    "transaction",
    "alert_rule",
    "access_key",
    "alert_receiver",
    "scheduled_message",
]

# What each kind is called in the message, and the details key naming it (api-v1 error codes
# ``<kind>_not_found``).
_NOT_FOUND: dict[NotFoundKind, tuple[str, str]] = {
    "topic": ("Topic", "topic"),
    "producer_group": ("Producer group", "producer_group"),
    "consumer_group": ("Consumer group", "consumer_group"),
    "message": ("Message", "msg_id"),
    "transaction": ("Transaction", "transaction_id"),
    "alert_rule": ("Alert rule", "name"),
    "access_key": ("Access key", "name"),
    "alert_receiver": ("Alert receiver", "name"),
    "scheduled_message": ("Scheduled message", "msg_id"),
}


def not_found(kind: NotFoundKind, name: str) -> NotFound:
    """The 404 for a ``kind`` named ``name`` that does not exist: code ``<kind>_not_found``,
    message "<Kind> <name> does not exist.", ``details`` ``{<key>: name}`` (``topic``,
    ``producer_group``, ``consumer_group``, ``msg_id``, ``transaction_id`` or ``name``)."""
    label, key = _NOT_FOUND[kind]
    return NotFound(
        f"{label} {name} does not exist.", code=f"{kind}_not_found", details={key: name}
    )


def silence_not_found(silence_id: int) -> NotFound:
    """The 404 for an unknown alert silence ``silence_id``: ``alert_silence_not_found``,
    ``details`` ``{"id": silence_id}``."""
    return NotFound(
        f"Silence {silence_id} does not exist.",
        code="alert_silence_not_found",
        details={"id": silence_id},
    )


ExistsKind = Literal[
    "topic", "producer_group", "consumer_group", "access_key", "alert_rule", "alert_receiver"
]

_EXISTS_LABEL: dict[ExistsKind, str] = {
    "topic": "Topic",
    "producer_group": "Producer group",
    "consumer_group": "Consumer group",
    "access_key": "Access key",
    "alert_rule": "Alert rule",
    "alert_receiver": "Alert receiver",
}


def already_exists(kind: ExistsKind, name: str) -> Conflict:
    """The 409 for creating a ``kind`` named ``name`` that exists already: code
    ``<kind>_exists``, message "<Kind> <name> already exists.", ``details`` ``{"name": name}``."""
    return Conflict(
        f"{_EXISTS_LABEL[kind]} {name} already exists.",
        code=f"{kind}_exists",
        details={"name": name},
    )


class TransactionAlreadyResolved(Conflict):
    """A commit or rollback that contradicts the transaction's state (api-v1, end)."""

    code = "transaction_already_resolved"

    def __init__(self, transaction_id: str, state: str, *, ended: dict[str, Any] | None = None):
        """``ended``: what ended it (``broker.services.operations.audit.transaction_ended``: ``ended_by``
        text, ``resolved_by``, ``resolved_timestamp``, ...), added to ``details`` and named in
        the message."""
        by = f" by {ended['ended_by']}" if ended and ended.get("ended_by") else ""
        super().__init__(
            f"Transaction {transaction_id} is already {state}{by}.",
            details={**(ended or {}), "transaction_id": transaction_id, "state": state},
        )
