"""``manage.py settings_table``: print README.md's settings table from the code."""

from typing import Any

from django.core.management.base import BaseCommand

from halfmoon.broker_settings import settings_table


class Command(BaseCommand):
    help = "Print the Markdown table of every HALFMOON_* setting (README.md's 'Settings')."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(settings_table())
