"""``Authorization: Bearer <token>`` against stored access keys (api-v1, Authentication)."""

from __future__ import annotations

from dataclasses import dataclass, field

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from broker.lookups import access_key_by_hash
from broker.models import AccessKey
from broker.services.admin import token_hash


@dataclass(frozen=True)
class KeyUser:
    """The caller behind an access key, as ``request.user``."""

    name: str
    is_admin: bool
    producer_groups: frozenset[str] = field(default_factory=frozenset)
    consumer_groups: frozenset[str] = field(default_factory=frozenset)
    is_authenticated: bool = True

    def may_produce(self, group: str) -> bool:
        """Send half messages, end transactions and read transactions of ``group``."""
        return self.is_admin or group in self.producer_groups

    def may_consume(self, group: str) -> bool:
        """Receive and ack for consumer group ``group``."""
        return self.is_admin or group in self.consumer_groups

    def producer_scope(self) -> list[str] | None:
        """None for an admin (every group), else the key's producer groups."""
        return None if self.is_admin else sorted(self.producer_groups)


class AccessKeyAuthentication(BaseAuthentication):
    """Bearer tokens made by ``manage.py create_access_key``; only their SHA-256 is stored."""

    def authenticate(self, request: Request) -> tuple[KeyUser, AccessKey] | None:
        header = get_authorization_header(request)
        if not header:
            return None
        try:
            scheme, _, token = header.decode("latin-1").partition(" ")
        except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
            raise exceptions.AuthenticationFailed(
                "The Authorization header is unreadable."
            ) from exc
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise exceptions.AuthenticationFailed("Use the header 'Authorization: Bearer <token>'.")
        key = access_key_by_hash(token_hash(token))
        if key is None:
            raise exceptions.AuthenticationFailed("The access key is unknown or was revoked.")
        user = KeyUser(
            name=key.name,
            is_admin=key.is_admin,
            producer_groups=frozenset(key.producer_groups),
            consumer_groups=frozenset(key.consumer_groups),
        )
        return user, key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="halfmoon"'


class AccessKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Declares the access keys in the OpenAPI schema (``Authorization: Bearer <token>``), so
    the schema names how to authenticate and /api/docs/ offers its Authorize button."""

    target_class = AccessKeyAuthentication
    name = "accessKey"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An access key made by `python manage.py create_access_key`.",
        }
