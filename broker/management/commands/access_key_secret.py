"""``manage.py access_key_secret NAME [--clear]``"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from broker.errors import HalfmoonError
from broker.services.access.secrets import (
    access_key_secret_clear,
    access_key_secret_encryption_check,
    access_key_secret_set,
)


class Command(BaseCommand):
    help = (
        "Give an access key a new RocketMQ SecretKey (its AccessKey is the key's name) for "
        "MQv2-HMAC-SHA1-signed gRPC calls, and print it alone on the last line (shown this "
        "once, stored encrypted; the previous one stops working). --clear removes it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the access key's name (the clients' AccessKey)")
        parser.add_argument(
            "--clear",
            action="store_true",
            help="remove the SecretKey: signed gRPC calls of this key are refused",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"]
        try:
            if options["clear"]:
                access_key_secret_clear(name=name)
                self.stdout.write(
                    f"Access key {name} has no RocketMQ SecretKey now: its signed gRPC calls "
                    "are refused."
                )
                return
            access_key_secret_encryption_check()
            secret = access_key_secret_set(name=name)
        except (HalfmoonError, ImproperlyConfigured) as exc:
            raise CommandError(getattr(exc, "message", str(exc))) from exc
        self.stderr.write(
            f"RocketMQ SecretKey of access key {name} (AccessKey {name}), shown this once:"
        )
        self.stdout.write(secret)
