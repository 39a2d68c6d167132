"""Who may do what in the console: view mixins, the object permissions of scoped operators and
the template flags.

Views are classes that mix in ``ViewConsoleRequired`` (viewer), ``OperateConsoleRequired``
(full operator), ``ManageConsoleRequired`` (admin), or, for an action on one producer or
consumer group's objects, ``TransactionOperateRequired`` / ``ConsumerGroupOperateRequired``
(a full operator, or an operator scoped to that group). An anonymous visitor is sent to the
sign-in page; a signed-in user without the permission gets 403.

More: docs/design.md, "Module notes", console/permissions.py."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import BaseBackend
from django.contrib.auth.mixins import PermissionRequiredMixin
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404, HttpRequest

from broker.errors import NotFound
from broker.models import ConsumerGroup, ProducerGroup, Transaction
from broker.rules.grants import NO_SCOPE, GroupRef, OperatorScope, scope_description
from broker.selectors.grants import operator_scope
from broker.selectors.transactions import transaction_get
from console.roles import MANAGE, OPERATE, VIEW

_SCOPE_CACHE = "_halfmoon_operator_scope"  # on the user object: one grants query per request

User = AbstractBaseUser | AnonymousUser


def operator_scope_of_user(user: User) -> OperatorScope:
    """The groups ``user`` may operate (``broker.rules.grants.OperatorScope``): every group for
    an active user with ``console.operate_console`` (``FULL_SCOPE``), its operator grants'
    groups otherwise (``NO_SCOPE`` for a viewer), nothing for an anonymous or inactive user.
    Cached on the user object, so one request reads the grants once."""
    if not user.is_authenticated or not user.is_active:
        return NO_SCOPE
    scope = getattr(user, _SCOPE_CACHE, None)
    if scope is None:
        scope = operator_scope(full=user.has_perm(OPERATE), user_id=user.pk)
        setattr(user, _SCOPE_CACHE, scope)
    return scope


def operator_scope_forget(user: User) -> None:
    """Drop the scope cached on ``user`` (after its grants or role changed in this request)."""
    if hasattr(user, _SCOPE_CACHE):
        delattr(user, _SCOPE_CACHE)


def group_of(obj: Any) -> GroupRef | None:
    """The group an object permission on ``obj`` is about: a transaction's producer group, a
    producer or consumer group, a ``GroupRef`` itself; None for anything else."""
    if isinstance(obj, GroupRef):
        return obj
    if isinstance(obj, Transaction):
        return GroupRef.producer(obj.producer_group)
    if isinstance(obj, ProducerGroup):
        return GroupRef.producer(obj.name)
    if isinstance(obj, ConsumerGroup):
        return GroupRef.consumer(obj.name)
    return None


class OperatorGrantBackend(BaseBackend):
    """Django authorization backend of the scoped operators: answers
    ``has_perm("console.operate_console", obj)`` for the objects of ``group_of`` from
    ``operator_scope_of_user``. Authenticates nobody; every other question is left to the
    other backends (``ModelBackend`` answers the permissions without an object)."""

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        if obj is None or perm != OPERATE:
            return False
        group = group_of(obj)
        if group is None or not user_obj.has_perm(VIEW):
            return False
        return operator_scope_of_user(user_obj).may_operate(group)


def may_operate_producer_group(user: User, group: str) -> bool:
    """May ``user`` act on the transactions of producer group ``group`` (commit, roll back,
    resume checks, check now)? Django's object permission ``console.operate_console`` on the
    group."""
    return user.has_perm(OPERATE, GroupRef.producer(group))


def may_operate_consumer_group(user: User, group: str) -> bool:
    """May ``user`` operate consumer group ``group`` (reset its offsets, skip its backlog,
    resend to it, its dead-letter queue)? Django's object permission ``console.operate_console``
    on the group: a full operator, or an operator scoped to ``group``."""
    return user.has_perm(OPERATE, GroupRef.consumer(group))


class ViewConsoleRequired(PermissionRequiredMixin):
    """Viewer, operator or admin (``console.view_console``)."""

    permission_required = (VIEW,)

    def handle_no_permission(self) -> Any:
        # Anonymous: to the sign-in page; signed in without the right: 403.
        self.raise_exception = self.request.user.is_authenticated
        return super().handle_no_permission()


class OperateConsoleRequired(ViewConsoleRequired):
    """Full operator or admin (``console.operate_console``): every group, and what belongs to
    no group (alert silences, notifications, reconciliation runs)."""

    permission_required = (VIEW, OPERATE)


class OperateAnyGroupRequired(ViewConsoleRequired):
    """A full operator, or an operator scoped to at least one group: the views that act on a
    set whose groups they check themselves (bulk previews and their confirmation)."""

    def has_permission(self) -> bool:
        user = self.request.user
        return user.has_perm(VIEW) and operator_scope_of_user(user).operates_any


class TransactionOperateRequired(ViewConsoleRequired):
    """An action on the transaction of the URL's ``transaction_id``: a full operator, or an
    operator scoped to the transaction's producer group. For a scoped operator an unknown
    transaction is 404 (a full operator's action on it is refused by the service, as before)."""

    def has_permission(self) -> bool:
        user = self.request.user
        if not user.has_perm(VIEW):
            return False
        if user.has_perm(OPERATE):
            return True
        if not operator_scope_of_user(user).operates_any:
            return False
        try:
            tx = transaction_get(self.kwargs["transaction_id"])
        except NotFound as exc:
            raise Http404(exc.message) from None
        return user.has_perm(OPERATE, tx)


class ConsumerGroupOperateRequired(ViewConsoleRequired):
    """An action on one consumer group, named by the URL keyword ``group_url_kwarg``
    (``"name"`` unless a view says otherwise): a full operator, or an operator scoped to that
    consumer group (``may_operate_consumer_group``)."""

    group_url_kwarg = "name"

    def has_permission(self) -> bool:
        user = self.request.user
        group = self.kwargs[self.group_url_kwarg]
        return user.has_perm(VIEW) and may_operate_consumer_group(user, group)


class ManageConsoleRequired(ViewConsoleRequired):
    """Admin (``console.manage_console``)."""

    permission_required = (VIEW, MANAGE)


def console_context(request: HttpRequest) -> dict[str, Any]:
    """Template context processor: ``can_view``, ``can_operate`` (a full operator),
    ``can_operate_any`` (a full operator or one scoped to some group), ``operator_scope_text``
    (a scoped operator's groups in words, else "") and ``can_manage`` for the signed-in user
    (all False for anonymous visitors). Templates show group-wide controls only when
    ``can_operate``, and a transaction's or a group's controls only when the filters of
    ``console_grants`` allow it for that object; the views check again."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {
            "can_view": False,
            "can_operate": False,
            "can_operate_any": False,
            "operator_scope_text": "",
            "can_manage": False,
        }
    can_view = user.has_perm(VIEW)
    scope = operator_scope_of_user(user) if can_view else NO_SCOPE
    return {
        "can_view": can_view,
        "can_operate": can_view and user.has_perm(OPERATE),
        "can_operate_any": scope.operates_any,
        "operator_scope_text": ""
        if scope.is_full or not scope.operates_any
        else scope_description(scope),
        "can_manage": can_view and user.has_perm(MANAGE),
    }
