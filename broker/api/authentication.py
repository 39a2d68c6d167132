"""``Authorization: Bearer <token>`` against stored access keys (api-v1, Authentication)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from broker.lookups import access_key_by_hash
from broker.models import AccessKey
from broker.rules.grants import FULL_SCOPE, NO_SCOPE, OperatorScope
from broker.selectors.grants import operator_scope
from broker.services.topology.writes import token_hash


@dataclass(frozen=True)
class KeyUser:
    """The caller behind an access key, as ``request.user``.

    ``producer_groups`` / ``consumer_groups``: the groups it sends and consumes for.
    ``key_id``: the access key's id, whose operator grants (``broker.models.OperatorGrant``)
    ``operator_scope`` reads on first use (the operator endpoints only; one query a request).
    """

    name: str
    is_admin: bool
    producer_groups: frozenset[str] = field(default_factory=frozenset)
    consumer_groups: frozenset[str] = field(default_factory=frozenset)
    is_authenticated: bool = True
    key_id: int | None = None

    @cached_property
    def operator_scope(self) -> OperatorScope:
        """The groups this key may operate (``broker.rules.grants``): every group for an admin
        key, else its operator grants' groups (none for a key without grants)."""
        if self.is_admin:
            return FULL_SCOPE
        if self.key_id is None:
            return NO_SCOPE
        return operator_scope(full=False, access_key_id=self.key_id)

    def may_operate_producer_group(self, group: str) -> bool:
        """Resolve and resume the checks of the transactions of producer group ``group``."""
        return self.operator_scope.may_operate_producer_group(group)

    def may_operate_consumer_group(self, group: str) -> bool:
        """Operate consumer group ``group`` (offsets, resends, its dead-letter queue)."""
        return self.operator_scope.may_operate_consumer_group(group)

    def may_read_transactions(self, group: str) -> bool:
        """Read the transactions of producer group ``group``: a key that acts for it, or may
        operate it (the grants are read only when it does not act for it)."""
        return self.may_produce(group) or self.may_operate_producer_group(group)

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
            key_id=key.pk,
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
