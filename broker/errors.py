"""The application's error hierarchy.

Each error carries the contract's ``code`` (snake_case), a one-sentence ``message``, optional
``details`` and the HTTP status it maps to; ``broker.api.exceptions.exception_handler`` renders
all of them as ``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

from typing import Any


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
    status_code = 400
    code = "invalid_input"


class NotFound(HalfmoonError):
    status_code = 404
    code = "not_found"


class Forbidden(HalfmoonError):
    status_code = 403
    code = "permission_denied"


class Conflict(HalfmoonError):
    status_code = 409
    code = "conflict"


class TooLarge(HalfmoonError):
    status_code = 413
    code = "too_large"


class TransactionAlreadyResolved(Conflict):
    """A commit or rollback that contradicts the transaction's state (api-v1, end)."""

    code = "transaction_already_resolved"

    def __init__(self, transaction_id: str, state: str):
        super().__init__(
            f"Transaction {transaction_id} is already {state}.",
            details={"transaction_id": transaction_id, "state": state},
        )
