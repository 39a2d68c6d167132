"""A gRPC call's metadata (RocketMQ 5 clients' ``x-mq-*`` headers) and who the caller is: the
``MQv2-HMAC-SHA1`` signature checked by ``broker.services.access.secrets``, anonymous calls
refused unless ``HALFMOON_GRPC_ALLOW_ANONYMOUS``, one namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from django.conf import settings

from broker.errors import InvalidInput, Unauthorized
from broker.services.access.callers import ANONYMOUS, Caller, caller_of_key
from broker.services.access.secrets import signature_authenticate


@dataclass(frozen=True)
class CallMetadata:
    """The headers a RocketMQ 5 client sends on every call.

    ``client_id``: ``x-mq-client-id`` ("" when absent); ``language``: ``x-mq-language``;
    ``version``: ``x-mq-client-version``; ``namespace``: ``x-mq-namespace``;
    ``authorization`` and ``date_time`` (``x-mq-date-time``): None when absent;
    ``peer``: the caller's address as gRPC names it (``ipv4:10.0.0.1:5000``).
    """

    client_id: str
    language: str
    version: str
    namespace: str
    authorization: str | None
    date_time: str | None
    peer: str

    @property
    def host(self) -> str:
        """The caller's address without gRPC's scheme word (``10.0.0.1:5000``)."""
        scheme, _, rest = self.peer.partition(":")
        return rest if scheme in ("ipv4", "ipv6", "unix") else self.peer


def call_metadata(context: grpc.aio.ServicerContext) -> CallMetadata:
    """Read ``context``'s invocation metadata."""
    headers: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            headers.setdefault(key.lower(), value)
    return CallMetadata(
        client_id=headers.get("x-mq-client-id", ""),
        language=headers.get("x-mq-language", ""),
        version=headers.get("x-mq-client-version", ""),
        namespace=headers.get("x-mq-namespace", ""),
        authorization=headers.get("authorization"),
        date_time=headers.get("x-mq-date-time"),
        peer=context.peer() or "",
    )


def namespace_check(*namespaces: str) -> None:
    """Halfmoon has one namespace, the empty one: a call naming another (``x-mq-namespace``
    or a resource's ``resource_namespace``) is refused rather than served from a namespace it
    did not ask for.

    Raises:
        InvalidInput: ``namespace_not_served``.
    """
    for namespace in namespaces:
        if namespace:
            raise InvalidInput(
                f"Halfmoon serves no namespace but the empty one, not {namespace!r}: unset the "
                "client's namespace.",
                code="namespace_not_served",
            )


def caller_authenticate(metadata: CallMetadata) -> Caller:
    """The caller of a call: the access key that signed it, or the anonymous caller (no
    ``authorization`` header, or an empty Credential) when ``HALFMOON_GRPC_ALLOW_ANONYMOUS``
    is true. Reads the database (the key, cached per process by ``broker.lookups``): call it
    in a worker thread.

    Raises:
        Unauthorized: a refused signature (unknown key, a key without a RocketMQ secret, a bad
            signature); an anonymous call while anonymous calls are refused.
    """
    key = signature_authenticate(authorization=metadata.authorization, date_time=metadata.date_time)
    if key is not None:
        return caller_of_key(key)
    if not settings.HALFMOON_GRPC_ALLOW_ANONYMOUS:
        raise Unauthorized(
            "Anonymous calls are refused: sign the calls with an access key and its secret "
            "(the client's credentials), or set HALFMOON_GRPC_ALLOW_ANONYMOUS=true."
        )
    return ANONYMOUS
