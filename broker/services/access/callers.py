"""Who is calling, outside HTTP: an access key's rights as the gRPC interface checks them (the
same rights ``broker.api.authentication.KeyUser`` gives an HTTP caller, by group)."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.models import AccessKey


@dataclass(frozen=True)
class Caller:
    """The caller behind an access key, or an anonymous caller (allowed by
    ``HALFMOON_GRPC_ALLOW_ANONYMOUS``), which may do anything an admin key may.

    ``name``: the access key's name ("" when anonymous).
    """

    name: str
    is_admin: bool
    producer_groups: frozenset[str] = field(default_factory=frozenset)
    consumer_groups: frozenset[str] = field(default_factory=frozenset)
    anonymous: bool = False

    def may_produce(self, group: str) -> bool:
        """Send half messages to and end transactions of producer group ``group``."""
        return self.is_admin or group in self.producer_groups

    def may_send(self) -> bool:
        """Send normal (and delay) messages to any user topic: an admin key or a key with a
        producer group (api-v1, Authentication; HTTP's ``require_any_producer``)."""
        return self.is_admin or bool(self.producer_groups)

    def may_consume(self, group: str) -> bool:
        """Receive, ack and change deliveries of consumer group ``group``."""
        return self.is_admin or group in self.consumer_groups

    def key_producer_groups(self) -> frozenset[str] | None:
        """The key's producer groups, None for an admin key or an anonymous caller (the
        argument ``broker.rules.producer_groups.grpc_producer_group`` takes)."""
        return None if self.is_admin else self.producer_groups


ANONYMOUS = Caller(name="", is_admin=True, anonymous=True)
"""The caller of a call without credentials, when anonymous calls are allowed."""


def caller_of_key(key: AccessKey) -> Caller:
    """The rights of access key ``key``: admin, or its producer and consumer groups."""
    return Caller(
        name=key.name,
        is_admin=key.is_admin,
        producer_groups=frozenset(key.producer_groups),
        consumer_groups=frozenset(key.consumer_groups),
    )
