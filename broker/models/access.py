"""Access keys and the operator grants scoping them and console users to named groups."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from broker.rules.clock import now_ms
from broker.rules.grants import CONSUMER_GROUP, PRODUCER_GROUP


class AccessKey(models.Model):
    """An access key; only the SHA-256 of its token is stored."""

    name = models.CharField(max_length=127, unique=True)
    token_prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key")
    token_hash = models.CharField(max_length=64, unique=True)
    is_admin = models.BooleanField(default=False)
    producer_groups = models.JSONField(default=list, blank=True)
    consumer_groups = models.JSONField(default=list, blank=True)
    created_timestamp = models.BigIntegerField(default=now_ms)
    secret_encrypted = models.TextField(
        blank=True,
        default="",
        help_text="The RocketMQ SecretKey of this AccessKey (MQv2-HMAC-SHA1 over gRPC), "
        "encrypted with a key derived from the server's secret; empty: none",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_prefix}...)"


class OperatorGrant(models.Model):
    """The operator role for one named producer or consumer group, given to a console user or
    an access key that is not a full operator (``broker.rules.grants``): the holder may act on
    the transactions of that producer group, or operate that consumer group, and only view the
    rest. Written by ``broker.services.access.grants``; read by ``broker.selectors.grants``. The group
    need not exist yet (as an access key's producer and consumer groups)."""

    class Kind(models.TextChoices):
        PRODUCER_GROUP = PRODUCER_GROUP, "producer group"
        CONSUMER_GROUP = CONSUMER_GROUP, "consumer group"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="operator_grants",
        db_index=False,  # operator_grant_user_unique starts with user_id
    )
    access_key = models.ForeignKey(
        AccessKey,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="operator_grants",
        db_index=False,  # operator_grant_key_unique starts with access_key_id
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    group = models.CharField(max_length=127, help_text="The producer or consumer group's name")
    granted_by = models.CharField(max_length=160, blank=True, default="")
    granted_timestamp = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["kind", "group"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, access_key__isnull=True)
                | Q(user__isnull=True, access_key__isnull=False),
                name="operator_grant_one_holder",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[PRODUCER_GROUP, CONSUMER_GROUP]),
                name="operator_grant_kind_valid",
            ),
            # broker.selectors.grants.operator_scope reads a holder's grants by these.
            models.UniqueConstraint(
                fields=["user", "kind", "group"],
                condition=Q(user__isnull=False),
                name="operator_grant_user_unique",
            ),
            models.UniqueConstraint(
                fields=["access_key", "kind", "group"],
                condition=Q(access_key__isnull=False),
                name="operator_grant_key_unique",
            ),
        ]

    def __str__(self) -> str:
        holder = f"user {self.user_id}" if self.user_id else f"access key {self.access_key_id}"
        return f"{holder}: operator of {self.get_kind_display()} {self.group}"
