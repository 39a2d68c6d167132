"""``manage.py create_access_key NAME [--admin] [--producer-group G]... [--consumer-group G]...``"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from broker.errors import HalfmoonError
from broker.services.admin import access_key_create


class Command(BaseCommand):
    help = "Create an access key and print its token alone on the last line (it is not stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--admin", action="store_true", help="may do everything")
        parser.add_argument("--producer-group", action="append", default=[], dest="producer_groups")
        parser.add_argument("--consumer-group", action="append", default=[], dest="consumer_groups")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key, token = access_key_create(
                name=options["name"],
                is_admin=options["admin"],
                producer_groups=options["producer_groups"],
                consumer_groups=options["consumer_groups"],
            )
        except HalfmoonError as exc:
            raise CommandError(exc.message) from exc
        rights = ["admin"] if key.is_admin else []
        rights += [f"producer:{g}" for g in key.producer_groups] + [
            f"consumer:{g}" for g in key.consumer_groups
        ]
        self.stderr.write(f"Access key {key.name} ({', '.join(rights) or 'no rights'}). Token:")
        self.stdout.write(token)
