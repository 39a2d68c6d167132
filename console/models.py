"""The console's permissions. ``ConsoleAccess`` has no table (``managed = False``): it only
carries the three permissions the console's roles are made of (Django groups ``viewer``,
``operator`` and ``admin``, see ``console.roles``)."""

from __future__ import annotations

from django.db import models


class ConsoleAccess(models.Model):
    """Holder of the console permissions ``console.view_console`` (see transactions, groups,
    charts, the audit log; receive the live feed), ``console.operate_console`` (commit, roll
    back, resume checks, check now, bulk actions) and ``console.manage_console`` (create and
    edit topics, producer groups and consumer groups)."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_console", "Can view the console"),
            ("operate_console", "Can act on transactions in the console"),
            ("manage_console", "Can manage topics and groups in the console"),
        ]

    def __str__(self) -> str:
        return "console access"
