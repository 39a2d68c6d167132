"""The console's three roles, as Django groups holding the ``console`` permissions.

- ``viewer``: ``view_console``.
- ``operator``: ``view_console``, ``operate_console``.
- ``admin``: ``view_console``, ``operate_console``, ``manage_console``.

A superuser has every permission. The groups are created after each ``migrate``
(``roles_ensure`` on post_migrate, ``console.apps``) and by ``create_console_user``.
"""

from __future__ import annotations

from typing import Literal

Role = Literal["viewer", "operator", "admin"]

VIEW = "console.view_console"
OPERATE = "console.operate_console"
MANAGE = "console.manage_console"

ROLE_PERMISSIONS: dict[Role, tuple[str, ...]] = {
    "viewer": ("view_console",),
    "operator": ("view_console", "operate_console"),
    "admin": ("view_console", "operate_console", "manage_console"),
}
ROLES: tuple[Role, ...] = tuple(ROLE_PERMISSIONS)


def roles_ensure() -> None:
    """Create (or complete) the groups ``viewer``, ``operator`` and ``admin`` with their
    permissions. Idempotent; runs after every ``migrate``."""
    from django.contrib.auth.models import Group, Permission

    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        perms = Permission.objects.filter(content_type__app_label="console", codename__in=codenames)
        group.permissions.add(*perms)
