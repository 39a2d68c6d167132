"""Back-check signatures (api-v1, "Back-check: broker to producer"). Django-free: the broker
signs with it and the Python client (broker/client.py) verifies with it."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Halfmoon-Signature"


def sign_check_body(secret: str, body: bytes) -> str:
    """The ``X-Halfmoon-Signature`` value of a back-check body:
    ``sha256=<hex HMAC-SHA256 of the raw body keyed with the UTF-8 bytes of secret>``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    """True if ``header`` is the signature of ``body`` under ``secret`` (constant-time compare)."""
    if not header:
        return False
    return hmac.compare_digest(
        sign_check_body(secret, body).encode("ascii"), header.strip().encode("ascii", "replace")
    )
