"""``manage.py create_console_user NAME --role viewer|operator|admin [--password P]``"""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.roles import ROLES
from console.services import console_user_create


class Command(BaseCommand):
    help = (
        "Create a console user of a role, or change an existing user's role (and password). "
        "Without --password, asks for it twice on the terminal."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=ROLES, help="the console role")
        parser.add_argument("--password", help="the password (asked for when left out)")

    def handle(self, *args: Any, **options: Any) -> None:
        password = options["password"]
        if password is None:
            password = self._password_ask()
        try:
            user = console_user_create(
                username=options["username"], role=options["role"], password=password
            )
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        staff = ", may open /admin/" if user.is_staff else ""
        self.stdout.write(f"Console user {user.get_username()}: {options['role']}{staff}.")

    def _password_ask(self) -> str:
        if not sys.stdin.isatty():
            raise CommandError("No --password given and no terminal to ask for one.")
        password = getpass.getpass("Password: ")
        if password != getpass.getpass("Password (again): "):
            raise CommandError("The two passwords differ.")
        return password
