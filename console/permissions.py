"""Who may do what in the console: view mixins and the template flags.

Views are classes that mix in ``ViewConsoleRequired`` (viewer), ``OperateConsoleRequired``
(operator) or ``ManageConsoleRequired`` (admin). An anonymous visitor is sent to the sign-in
page; a signed-in user without the permission gets 403.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.mixins import PermissionRequiredMixin
from django.http import HttpRequest

from console.roles import MANAGE, OPERATE, VIEW


class ViewConsoleRequired(PermissionRequiredMixin):
    """Viewer, operator or admin (``console.view_console``)."""

    permission_required = (VIEW,)

    def handle_no_permission(self) -> Any:
        # Anonymous: to the sign-in page; signed in without the right: 403.
        self.raise_exception = self.request.user.is_authenticated
        return super().handle_no_permission()


class OperateConsoleRequired(ViewConsoleRequired):
    """Operator or admin (``console.operate_console``)."""

    permission_required = (VIEW, OPERATE)


class ManageConsoleRequired(ViewConsoleRequired):
    """Admin (``console.manage_console``)."""

    permission_required = (VIEW, MANAGE)


def console_context(request: HttpRequest) -> dict[str, bool]:
    """Template context processor: ``can_view``, ``can_operate``, ``can_manage`` for the
    signed-in user (all False for anonymous visitors). Templates show action controls only
    when ``can_operate`` (or ``can_manage``) is true; the views check again."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"can_view": False, "can_operate": False, "can_manage": False}
    return {
        "can_view": user.has_perm(VIEW),
        "can_operate": user.has_perm(VIEW) and user.has_perm(OPERATE),
        "can_manage": user.has_perm(VIEW) and user.has_perm(MANAGE),
    }
