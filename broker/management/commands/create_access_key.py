"""``manage.py create_access_key NAME [--admin] [--producer-group G]... [--consumer-group G]...
[--secret]``"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from broker.errors import HalfmoonError
from broker.services.access_key_secrets import (
    access_key_secret_encryption_check,
    access_key_secret_set,
)
from broker.services.admin import access_key_create


class Command(BaseCommand):
    help = (
        "Create an access key and print its token alone on the last line (it is not stored). "
        "--secret also gives it a RocketMQ SecretKey, printed on standard error on the line "
        "'RocketMQ SecretKey: <secret>' (manage.py access_key_secret NAME prints a new one "
        "alone on its last line)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--admin", action="store_true", help="may do everything")
        parser.add_argument("--producer-group", action="append", default=[], dest="producer_groups")
        parser.add_argument("--consumer-group", action="append", default=[], dest="consumer_groups")
        parser.add_argument(
            "--secret",
            action="store_true",
            help="also make a RocketMQ SecretKey (AccessKey: NAME) for signed gRPC calls",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["secret"]:
                access_key_secret_encryption_check()
            key, token = access_key_create(
                name=options["name"],
                is_admin=options["admin"],
                producer_groups=options["producer_groups"],
                consumer_groups=options["consumer_groups"],
            )
            secret = access_key_secret_set(name=key.name) if options["secret"] else None
        except (HalfmoonError, ImproperlyConfigured) as exc:
            raise CommandError(getattr(exc, "message", str(exc))) from exc
        rights = ["admin"] if key.is_admin else []
        rights += [f"producer:{g}" for g in key.producer_groups] + [
            f"consumer:{g}" for g in key.consumer_groups
        ]
        if secret is not None:
            self.stderr.write(f"AccessKey: {key.name}")
            self.stderr.write(f"RocketMQ SecretKey: {secret}")
        self.stderr.write(f"Access key {key.name} ({', '.join(rights) or 'no rights'}). Token:")
        self.stdout.write(token)
