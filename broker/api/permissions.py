"""Permission classes. Per-group rights are checked in the views with ``KeyUser.may_*`` since
the group comes from the request body or the URL.

Operators: an admin key operates every group; a key with operator grants
(``create_access_key --operator-producer-group G``, ``broker.rules.grants``) operates its
groups only. ``IsOperatorKey`` lets either in; the view then names the group with
``require_producer_group_operator`` / ``require_consumer_group_operator`` (403
``permission_denied`` for another group's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.permissions import BasePermission

from broker.errors import Forbidden
from broker.lookups import producer_group_require
from broker.services.access.callers import Caller

if TYPE_CHECKING:  # rest_framework.views imports this module through its settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


class IsAuthenticatedKey(BasePermission):
    """Any valid access key."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None


class IsAdminKey(BasePermission):
    """An access key made with ``--admin``."""

    message = "This operation needs an admin access key."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None and request.user.is_admin


class IsOperatorKey(BasePermission):
    """An admin access key, or a key with operator grants for some group (whose group the view
    checks with ``require_producer_group_operator`` / ``require_consumer_group_operator``)."""

    message = "This operation needs an admin access key or an operator grant for the group."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None and request.user.operator_scope.operates_any


def require_producer_group_operator(request: Request, group: str) -> None:
    """Raises Forbidden (403 ``permission_denied``, ``details.producer_group``) unless the
    caller's key may operate producer group ``group``'s transactions: an admin key, or a key
    with an operator grant for ``group``."""
    if not request.user.may_operate_producer_group(group):
        raise Forbidden(
            f"This access key may not operate the transactions of producer group {group}.",
            details={"producer_group": group},
        )


def require_consumer_group_operator(request: Request, group: str) -> None:
    """Raises Forbidden (403 ``permission_denied``, ``details.consumer_group``) unless the
    caller's key may operate consumer group ``group`` (reset offsets, skip the backlog, resend,
    its dead-letter queue): an admin key, or a key with an operator grant for ``group``."""
    if not request.user.may_operate_consumer_group(group):
        raise Forbidden(
            f"This access key may not operate consumer group {group}.",
            details={"consumer_group": group},
        )


def operator_actor(request: Request) -> str:
    """Who an operator action through the API is recorded as in the audit log and the
    journals: ``operator:<access key name>``."""
    return f"operator:{request.user.name}"


def require_producer(request: Request, group: str) -> None:
    """Raises Forbidden unless the caller's key may act for producer group ``group``."""
    if not request.user.may_produce(group):
        raise Forbidden(
            f"This access key may not act for producer group {group}.",
            details={"producer_group": group},
        )


def require_consumer(request: Request, group: str) -> None:
    """Raises Forbidden unless the caller's key may receive and ack for ``group``."""
    if not request.user.may_consume(group):
        raise Forbidden(
            f"This access key may not consume for consumer group {group}.",
            details={"consumer_group": group},
        )


def require_any_producer(request: Request) -> None:
    """Raises Forbidden unless the key is an admin or has at least one producer group."""
    if not (request.user.is_admin or request.user.producer_groups):
        raise Forbidden("This operation needs an admin key or a key with a producer group.")


def require_transaction_reader(request: Request) -> None:
    """Raises Forbidden unless the key may read some producer group's transactions: an admin,
    a key with a producer group, or a key operating a producer group (its grants are read only
    when it is neither)."""
    user = request.user
    if not (user.is_admin or user.producer_groups or user.operator_scope.producer_groups):
        raise Forbidden("This operation needs an admin key or a key with a producer group.")


def sender_group(request: Request, group: str) -> str:
    """The producer group a normal message is sent as (``POST /messages`` and each item of
    ``POST /messages/batch``): ``group`` when the request names one (the key must act for it,
    and it must exist), else the key's first producer group by name, else ``""`` (an admin key
    that names none: the message has no sender group, as a RocketMQ send without a group).

    Raises:
        Forbidden: the key may not act for ``group``.
        NotFound: ``producer_group_not_found``, no producer group ``group``.
    """
    if group:
        require_producer(request, group)
        producer_group_require(group)
        return group
    return min(request.user.producer_groups) if request.user.producer_groups else ""


def request_caller(request: Request) -> Caller:
    """The caller behind the request's access key as the services judge a caller outside HTTP
    (``broker.services.access.callers.Caller``: admin, or its producer and consumer groups), so
    that a rule written for gRPC's callers (a recall's) is the API's too."""
    user = request.user
    return Caller(
        name=user.name,
        is_admin=user.is_admin,
        producer_groups=frozenset(user.producer_groups),
        consumer_groups=frozenset(user.consumer_groups),
    )
