"""The client's errors: every non-2xx answer of the broker is a ``HalfmoonError`` carrying the
contract's error body (``{"error": {"code", "message", "details"}}``) and the HTTP status; a
broker that cannot be reached is a ``HalfmoonConnectionError`` (``status_code`` None)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx


class HalfmoonError(Exception):
    """A non-2xx answer of the broker, carrying the contract's error body.

    Attributes:
        status_code: the HTTP status (400, 401, 403, 404, 409, 413, ...), or None when the
            broker could not be reached (see ``HalfmoonConnectionError``).
        code: the snake_case error code, e.g. ``transaction_already_resolved``.
        message: one human sentence.
        details: the error's details object (e.g. ``{"state": "COMMITTED"}``).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status_code: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status_code = status_code
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        status = self.status_code if self.status_code is not None else "-"
        return f"[{status} {self.code}] {self.message}"

    @classmethod
    def from_response(cls, response: httpx.Response) -> HalfmoonError:
        """Build the error from a non-2xx ``response``; a body that is not the contract's
        (a proxy's HTML page, say) gives code ``http_<status>`` and its first 200 characters."""
        try:
            body = response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            details = error.get("details")
            return cls(
                str(error.get("message") or ""),
                code=error["code"],
                status_code=response.status_code,
                details=details if isinstance(details, dict) else {},
            )
        return cls(
            response.text[:200] or f"HTTP {response.status_code}",
            code=f"http_{response.status_code}",
            status_code=response.status_code,
        )

    @classmethod
    def from_error_object(cls, status_code: int, error: Any) -> HalfmoonError:
        """Build the error of one item of a batch answer (api-v1 "Batches"):
        ``{"status": 4xx, "error": {"code", "message", "details"}}``, the error the single
        endpoint would have answered for that item, so the same code and status as a single
        call's ``HalfmoonError``. An ``error`` that is not the contract's object gives code
        ``http_<status>``."""
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            details = error.get("details")
            return cls(
                str(error.get("message") or ""),
                code=error["code"],
                status_code=status_code,
                details=details if isinstance(details, dict) else {},
            )
        return cls(f"HTTP {status_code}", code=f"http_{status_code}", status_code=status_code)

    def copy(self) -> HalfmoonError:
        """A new error of the same type with the same status, code, message and details, this
        one as its ``__cause__``: a whole batch refused gives each of its items its own
        exception object (raised in several threads, each keeps its own traceback)."""
        twin = type(self)(
            self.message, code=self.code, status_code=self.status_code, details=self.details
        )
        twin.__cause__ = self
        return twin


class HalfmoonConnectionError(HalfmoonError):
    """The broker could not be reached, or did not answer in time (``status_code`` None)."""
