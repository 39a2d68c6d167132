"""Access keys' RocketMQ SecretKeys, and the ``MQv2-HMAC-SHA1`` signature of gRPC calls.

A RocketMQ 5 client signs every call with an AccessKey/SecretKey pair
(``broker.rules.signatures``). In Halfmoon the AccessKey is an access key's ``name`` and the
SecretKey a random secret the broker makes for that key (``access_key_secret_set``), shown once.
It is kept encrypted in ``AccessKey.secret_encrypted`` (Fernet: AES-128-CBC and HMAC-SHA256)
with a key derived from the server's ``SECRET_KEY`` (HKDF-SHA256, ``ENCRYPTION_LABEL``): never
in plain text, never logged. A server with another ``SECRET_KEY`` cannot read it: the key's
signed calls are then refused until an operator sets a new secret.

Decrypting costs more than the rest of a signature check, and a client signs every call, so
each process keeps a key's decrypted secret in memory for ``SECRET_CACHE_S``, under the key's
name, its ciphertext and the encryption key: a new secret, a cleared one or another
``SECRET_KEY`` is never answered from the cache, and the access key itself is read through
``broker.lookups.access_key_by_name`` (a changed or revoked key is seen everywhere within 1 s).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import secrets
import threading
from dataclasses import dataclass

from cachetools import TTLCache
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from broker.errors import Unauthorized, not_found
from broker.lookups import access_key_by_name
from broker.models import AccessKey
from broker.rules.secret_keys import DEVELOPMENT_SECRET_KEY
from broker.rules.signatures import SIGNED_HEADER, authorization_parse, signature_matches

logger = logging.getLogger("halfmoon.access_keys")

SECRET_BYTES = 32
"""Random bytes of a SecretKey (``secrets.token_urlsafe``: 43 URL-safe characters)."""
ENCRYPTION_LABEL = b"halfmoon access key secret"
"""HKDF's salt and info: the encryption key of SecretKeys serves nothing else."""
SECRET_CACHE_S = 60.0
"""How long a process keeps a decrypted SecretKey (s); a new secret has a new ciphertext, so it
is never answered from an older entry."""
SECRET_CACHE_MAX_ENTRIES = 10_000

_UNREADABLE = object()  # a ciphertext this server's key cannot decrypt (cached, logged once)


@dataclass(frozen=True)
class _Encryption:
    fernet: Fernet
    fingerprint: str  # SHA-256 of the derived key, names it in cache keys


@functools.lru_cache(maxsize=4)
def _encryption_for(secret_key: str) -> _Encryption:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=ENCRYPTION_LABEL, info=ENCRYPTION_LABEL
    ).derive(secret_key.encode())
    return _Encryption(
        fernet=Fernet(base64.urlsafe_b64encode(derived)),
        fingerprint=hashlib.sha256(derived).hexdigest(),
    )


def _encryption() -> _Encryption:
    return _encryption_for(settings.SECRET_KEY)


_secret_cache_lock = threading.Lock()
_secret_cache: TTLCache[tuple[str, str, str], object] = TTLCache(
    SECRET_CACHE_MAX_ENTRIES, SECRET_CACHE_S
)


def access_key_secret_set(*, name: str) -> str:
    """Give the access key ``name`` a new RocketMQ SecretKey and return it (43 URL-safe
    characters, ``SECRET_BYTES`` of entropy): the caller shows it once, it is stored only
    encrypted. Replaces any previous secret: calls signed with the old one are refused at once
    in this process, within 1 s in others (``broker.lookups``).

    Raises:
        NotFound: ``access_key_not_found``.
    """
    key = AccessKey.objects.filter(name=name).first()
    if key is None:
        raise not_found("access_key", name)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    key.secret_encrypted = _encryption().fernet.encrypt(secret.encode()).decode("ascii")
    key.save(update_fields=["secret_encrypted"])  # post_save: the cached key is forgotten
    return secret


def access_key_secret_clear(*, name: str) -> None:
    """Remove the access key ``name``'s RocketMQ SecretKey: its signed gRPC calls are refused
    from then on (its bearer token still works over HTTP).

    Raises:
        NotFound: ``access_key_not_found``.
    """
    key = AccessKey.objects.filter(name=name).first()
    if key is None:
        raise not_found("access_key", name)
    key.secret_encrypted = ""
    key.save(update_fields=["secret_encrypted"])


def access_key_secret_encryption_check() -> None:
    """Refuse to make a SecretKey the broker's servers could not read: this process has
    Django's development ``SECRET_KEY`` while the servers cannot (``DJANGO_DEBUG`` off, so they
    refuse to start with it) or do not (``bin/run`` generated ``var/secret_key`` for them). The
    management commands call it; the admin runs in a server and needs no check.

    Raises:
        ImproperlyConfigured: saying which key to run with.
    """
    if settings.SECRET_KEY != DEVELOPMENT_SECRET_KEY:
        return
    generated = settings.VAR_DIR / "secret_key"
    if generated.is_file() and generated.stat().st_size > 0:
        raise ImproperlyConfigured(
            "This command runs with Django's development SECRET_KEY but the broker's "
            f"servers use {generated} (made by bin/run): a SecretKey encrypted here could "
            f"not be read there. Run it with DJANGO_SECRET_KEY_FILE={generated}."
        )
    if not settings.DEBUG:
        raise ImproperlyConfigured(
            "This command runs with Django's development SECRET_KEY and DJANGO_DEBUG off: "
            "the broker's servers refuse that key, so a SecretKey encrypted with it could "
            "not be read. Run it with the servers' DJANGO_SECRET_KEY or DJANGO_SECRET_KEY_FILE."
        )


def signature_authenticate(*, authorization: str | None, date_time: str | None) -> AccessKey | None:
    """The access key that signed a gRPC call, from its ``authorization`` and
    ``x-mq-date-time`` headers (RocketMQ 5's ``MQv2-HMAC-SHA1``, ``broker.rules.signatures``;
    RocketMQ proxy ``DefaultAuthenticationContextBuilder``).

    Returns None for an anonymous call: no ``authorization`` header (or an empty one), or a
    well-formed one whose Credential is empty (the Python client without credentials); the
    caller decides whether anonymous calls are allowed. The date-time is signed, not checked
    for freshness (the Python client writes local time marked Z). Reads the key through
    ``broker.lookups`` and decrypts its secret at most every ``SECRET_CACHE_S`` per process.

    Raises:
        Unauthorized: a malformed header, an unknown access key, a key without a RocketMQ
            secret, no ``x-mq-date-time``, a secret this server cannot decrypt (its
            ``SECRET_KEY`` changed: the secret must be set again; logged as a warning), or a
            signature that does not match. ``details`` name the ``access_key`` once known.
    """
    if not authorization:
        return None
    try:
        signed = authorization_parse(authorization)
    except ValueError as exc:
        raise Unauthorized(str(exc)) from exc
    name = signed.access_key
    if name == "":
        return None
    details = {"access_key": name}
    key = access_key_by_name(name)
    if key is None:
        raise Unauthorized(f"Access key {name} does not exist.", details=details)
    if not key.secret_encrypted:
        raise Unauthorized(
            f"Access key {name} has no RocketMQ SecretKey: an operator gives it one with "
            f"manage.py access_key_secret {name}.",
            details=details,
        )
    if not date_time:
        raise Unauthorized(
            f"The {SIGNED_HEADER} header is missing: the signature is made over it.",
            details=details,
        )
    secret = _secret_of(key)
    if not signature_matches(secret=secret, date_time=date_time, signature=signed.signature):
        raise Unauthorized(
            f"The signature does not match access key {name}'s SecretKey.", details=details
        )
    return key


def _secret_of(key: AccessKey) -> str:
    """``key``'s decrypted SecretKey (cached ``SECRET_CACHE_S``).

    Raises:
        Unauthorized: this server's ``SECRET_KEY`` cannot decrypt it.
    """
    encryption = _encryption()
    cache_key = (key.name, key.secret_encrypted, encryption.fingerprint)
    with _secret_cache_lock:
        secret = _secret_cache.get(cache_key)
    if secret is None:
        try:
            secret = encryption.fernet.decrypt(key.secret_encrypted.encode("ascii")).decode()
        except (InvalidToken, UnicodeError):
            secret = _UNREADABLE
            logger.warning(
                "The RocketMQ SecretKey of access key %s cannot be decrypted with this "
                "server's SECRET_KEY (was it changed?): its signed gRPC calls are refused "
                "until it is set again (manage.py access_key_secret %s)",
                key.name,
                key.name,
            )
        with _secret_cache_lock:
            _secret_cache[cache_key] = secret
    if secret is _UNREADABLE:
        raise Unauthorized(
            f"The RocketMQ SecretKey of access key {key.name} cannot be read by this broker "
            f"(its SECRET_KEY changed): an operator must set it again with manage.py "
            f"access_key_secret {key.name}.",
            details={"access_key": key.name},
        )
    assert isinstance(secret, str)
    return secret
