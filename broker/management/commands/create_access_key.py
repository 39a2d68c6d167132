"""``manage.py create_access_key NAME [--admin] [--producer-group G]... [--consumer-group G]...
[--operator-producer-group G]... [--operator-consumer-group G]... [--secret]``"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from broker.errors import HalfmoonError
from broker.services.access.grants import operator_grants_set
from broker.services.access.secrets import (
    access_key_secret_encryption_check,
    access_key_secret_set,
)
from broker.services.topology.writes import access_key_create


class Command(BaseCommand):
    help = (
        "Create an access key and print its token alone on the last line (it is not stored). "
        "--secret also gives it a RocketMQ SecretKey, printed on standard error on the line "
        "'RocketMQ SecretKey: <secret>' (manage.py access_key_secret NAME prints a new one "
        "alone on its last line). --operator-producer-group / --operator-consumer-group make "
        "it an operator of those groups only (resolve and resume-check their transactions, "
        "operate those consumer groups)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--admin", action="store_true", help="may do everything")
        parser.add_argument("--producer-group", action="append", default=[], dest="producer_groups")
        parser.add_argument("--consumer-group", action="append", default=[], dest="consumer_groups")
        parser.add_argument(
            "--operator-producer-group",
            action="append",
            default=[],
            dest="operator_producer_groups",
            help="may resolve and resume-check this producer group's transactions (repeat)",
        )
        parser.add_argument(
            "--operator-consumer-group",
            action="append",
            default=[],
            dest="operator_consumer_groups",
            help="may operate this consumer group (repeat)",
        )
        parser.add_argument(
            "--secret",
            action="store_true",
            help="also make a RocketMQ SecretKey (AccessKey: NAME) for signed gRPC calls",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["admin"] and (
            options["operator_producer_groups"] or options["operator_consumer_groups"]
        ):
            raise CommandError("An admin key operates every group: leave out --operator-*.")
        try:
            if options["secret"]:
                access_key_secret_encryption_check()
            with transaction.atomic():
                key, token = access_key_create(
                    name=options["name"],
                    is_admin=options["admin"],
                    producer_groups=options["producer_groups"],
                    consumer_groups=options["consumer_groups"],
                )
                operator_grants_set(
                    access_key_id=key.pk,
                    producer_groups=options["operator_producer_groups"],
                    consumer_groups=options["operator_consumer_groups"],
                    granted_by="create_access_key",
                )
            secret = access_key_secret_set(name=key.name) if options["secret"] else None
        except (HalfmoonError, ImproperlyConfigured) as exc:
            raise CommandError(getattr(exc, "message", str(exc))) from exc
        rights = ["admin"] if key.is_admin else []
        rights += [f"producer:{g}" for g in key.producer_groups] + [
            f"consumer:{g}" for g in key.consumer_groups
        ]
        rights += [
            f"operator:producer:{g}" for g in sorted(set(options["operator_producer_groups"]))
        ]
        rights += [
            f"operator:consumer:{g}" for g in sorted(set(options["operator_consumer_groups"]))
        ]
        if secret is not None:
            self.stderr.write(f"AccessKey: {key.name}")
            self.stderr.write(f"RocketMQ SecretKey: {secret}")
        self.stderr.write(f"Access key {key.name} ({', '.join(rights) or 'no rights'}). Token:")
        self.stdout.write(token)
