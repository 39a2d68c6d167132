"""``manage.py create_console_user NAME --role viewer|operator|admin [--password P]
[--producer-group G]... [--consumer-group G]...``"""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from broker.rules.grants import scope_description
from broker.selectors.grants import operator_scope
from console.roles import ROLES
from console.services import console_user_create


class Command(BaseCommand):
    help = (
        "Create a console user of a role, or change an existing user's role (and password). "
        "Without --password, asks for it twice on the terminal. --role operator with "
        "--producer-group / --consumer-group makes an operator of those groups only (a viewer "
        "elsewhere); running again sets the groups anew (none: a full operator)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=ROLES, help="the console role")
        parser.add_argument("--password", help="the password (asked for when left out)")
        parser.add_argument(
            "--producer-group",
            action="append",
            default=[],
            dest="producer_groups",
            help="with --role operator: may act on this producer group's transactions (repeat)",
        )
        parser.add_argument(
            "--consumer-group",
            action="append",
            default=[],
            dest="consumer_groups",
            help="with --role operator: may operate this consumer group (repeat)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        password = options["password"]
        if password is None:
            password = self._password_ask()
        try:
            user = console_user_create(
                username=options["username"],
                role=options["role"],
                password=password,
                producer_groups=options["producer_groups"],
                consumer_groups=options["consumer_groups"],
            )
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        staff = ", may open /admin/" if user.is_staff else ""
        role = options["role"]
        if options["producer_groups"] or options["consumer_groups"]:
            scope = operator_scope(full=False, user_id=user.pk)
            role = f"operator of {scope_description(scope)} only, viewer elsewhere"
        self.stdout.write(f"Console user {user.get_username()}: {role}{staff}.")

    def _password_ask(self) -> str:
        if not sys.stdin.isatty():
            raise CommandError("No --password given and no terminal to ask for one.")
        password = getpass.getpass("Password: ")
        if password != getpass.getpass("Password (again): "):
            raise CommandError("The two passwords differ.")
        return password
