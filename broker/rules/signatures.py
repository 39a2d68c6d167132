"""RocketMQ 5's request signature: ``MQv2-HMAC-SHA1`` over ``x-mq-date-time``.

Every call of a RocketMQ 5 client carries two headers (rocketmq-clients' ``Signature``; RocketMQ
proxy ``DefaultAuthenticationContextBuilder``)::

    x-mq-date-time: 20240102T030405Z
    authorization: MQv2-HMAC-SHA1 Credential=<AccessKey>, SignedHeaders=x-mq-date-time,
        Signature=<hex HMAC-SHA1(SecretKey, value of x-mq-date-time)>

(one line). The Python client writes the signature in lower-case hex, the Node.js client in
upper-case: both are accepted. A client without credentials sends ``Credential=`` empty (Python)
or no ``authorization`` at all (Node.js).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

SIGNATURE_ALGORITHM = "MQv2-HMAC-SHA1"
"""The scheme word that opens the ``authorization`` header."""
SIGNED_HEADER = "x-mq-date-time"
"""The one header whose value is signed."""
SIGNATURE_HEX_LENGTH = 40
"""An HMAC-SHA1 digest is 20 bytes: 40 hex digits."""

_HEX = re.compile(r"[0-9a-fA-F]+")


@dataclass(frozen=True)
class SignedAuthorization:
    """A parsed ``authorization`` header.

    ``access_key``: the Credential ("" when the client has no credentials); ``signed_headers``:
    the SignedHeaders, lower-cased (empty when the header names none); ``signature``: the
    Signature's 40 hex digits, lower-cased.
    """

    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


def authorization_parse(header: str) -> SignedAuthorization:
    """Parse an ``authorization`` header of the ``MQv2-HMAC-SHA1`` scheme.

    The scheme word, then comma-separated ``Name=value`` items (spaces around each ignored,
    names case-sensitive as the clients write them): ``Credential`` (may be empty) and
    ``Signature`` (40 hex digits, either case) are required, ``SignedHeaders`` is optional but,
    when given, must name ``x-mq-date-time`` (a ``;``-separated list in RocketMQ's format);
    other items are ignored. ``Credential`` is taken whole, so an access key's name holding a
    comma cannot sign.

    Raises:
        ValueError: a header of another scheme or malformed, with a message saying what is wrong.
    """
    scheme, _, rest = header.strip().partition(" ")
    if scheme != SIGNATURE_ALGORITHM:
        raise ValueError(
            f"The authorization header must start with {SIGNATURE_ALGORITHM}, not {scheme!r}."
        )
    items: dict[str, str] = {}
    for item in rest.split(","):
        name, equals, value = item.strip().partition("=")
        if not equals:
            raise ValueError(f"The authorization header's item {item.strip()!r} is not Name=value.")
        items[name] = value.strip()
    if "Credential" not in items:
        raise ValueError("The authorization header has no Credential.")
    if "Signature" not in items:
        raise ValueError("The authorization header has no Signature.")
    signature = items["Signature"]
    if len(signature) != SIGNATURE_HEX_LENGTH or not _HEX.fullmatch(signature):
        raise ValueError(
            f"The authorization header's Signature must be {SIGNATURE_HEX_LENGTH} hex digits "
            "(HMAC-SHA1)."
        )
    signed_headers = tuple(
        h.strip().lower() for h in items.get("SignedHeaders", "").split(";") if h.strip()
    )
    if "SignedHeaders" in items and SIGNED_HEADER not in signed_headers:
        raise ValueError(f"The authorization header's SignedHeaders must name {SIGNED_HEADER}.")
    return SignedAuthorization(
        access_key=items["Credential"],
        signed_headers=signed_headers,
        signature=signature.lower(),
    )


def signature_compute(*, secret: str, date_time: str) -> str:
    """The signature a client with SecretKey ``secret`` sends for ``x-mq-date-time`` =
    ``date_time``: HMAC-SHA1 keyed by the UTF-8 secret over the UTF-8 date-time, in lower-case
    hex (40 characters), as rocketmq-clients' Python ``Signature.sign``."""
    mac = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1)
    return mac.hexdigest()


def signature_matches(*, secret: str, date_time: str, signature: str) -> bool:
    """True if ``signature`` (hex, either case) is ``date_time`` signed with ``secret``.

    Compared in constant time (``hmac.compare_digest``); a ``signature`` that is not ASCII
    hex never matches.
    """
    if not _HEX.fullmatch(signature):
        return False
    expected = signature_compute(secret=secret, date_time=date_time)
    return hmac.compare_digest(expected, signature.lower())
