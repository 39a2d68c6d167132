from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _roles_after_migrate(sender: AppConfig, **kwargs: Any) -> None:
    from console.roles import roles_ensure

    roles_ensure()


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Halfmoon console"

    def ready(self) -> None:
        post_migrate.connect(_roles_after_migrate, sender=self)
