"""Back-check signatures (api-v1, "Back-check: broker to producer").

The broker signs each back-check body with ``sign_check_body``; a producer's check endpoint
verifies it with ``signature_valid``. Both sides import this one module, so the rule is
written once. Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Halfmoon-Signature"
"""The HTTP header that carries a back-check's signature."""


def sign_check_body(secret: str, body: bytes) -> str:
    """The ``X-Halfmoon-Signature`` value of a back-check body.

    Args:
        secret: the producer group's ``check_secret``.
        body: the raw request body (bytes exactly as sent).

    Returns:
        ``"sha256=<hex HMAC-SHA256 of body keyed with the UTF-8 bytes of secret>"``.
    """
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    """True if ``header`` is the signature of ``body`` under ``secret`` (constant-time
    compare); False for a missing or empty header."""
    if not header:
        return False
    return hmac.compare_digest(
        sign_check_body(secret, body).encode("ascii"), header.strip().encode("ascii", "replace")
    )
