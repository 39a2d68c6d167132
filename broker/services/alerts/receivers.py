"""Alert receivers: every write of an ``AlertReceiver`` (the console, the API, the Django
admin) goes through here. A webhook receiver's URL passes the check-target rule against
HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS (``webhook_url_validate``); an e-mail receiver needs at
least one valid address. Each receiver gets a random ``secret`` (32 bytes, hex) that signs its
webhooks, shown once when it is created."""

from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from broker.errors import InvalidInput, not_found
from broker.models import AlertNotification, AlertReceiver
from broker.services.alerts.webhooks import webhook_url_validate
from broker.services.topology.writes import created_once, name_validate

EMAILS_MAX = 50


def receiver_target_validate(kind: str, url: str, emails: list[str]) -> None:
    """Check what a receiver of ``kind`` is sent to: a webhook kind (``alertmanager``,
    ``slack``) needs ``url``, judged by ``webhook_url_validate``; ``email`` needs 1 to
    ``EMAILS_MAX`` valid addresses in ``emails``.

    Raises:
        InvalidInput: ``invalid_receiver_kind``, ``url_required``,
            ``webhook_url_not_allowed``, ``emails_required``, ``invalid_email``.
    """
    if kind not in AlertReceiver.Kind.values:
        raise InvalidInput(
            f"kind must be one of {', '.join(AlertReceiver.Kind.values)}.",
            code="invalid_receiver_kind",
            details={"field": "kind"},
        )
    if kind == AlertReceiver.Kind.EMAIL:
        if not emails or len(emails) > EMAILS_MAX:
            raise InvalidInput(
                f"An e-mail receiver needs 1 to {EMAILS_MAX} addresses.",
                code="emails_required",
                details={"field": "emails"},
            )
        for address in emails:
            try:
                validate_email(address)
            except ValidationError as exc:
                raise InvalidInput(
                    f"{address!r} is not an e-mail address.",
                    code="invalid_email",
                    details={"field": "emails", "email": address},
                ) from exc
        return
    if not url:
        raise InvalidInput(
            "A webhook receiver needs a url.", code="url_required", details={"field": "url"}
        )
    webhook_url_validate(url)


def receiver_create(
    *, name: str, kind: str, url: str = "", emails: list[str] | None = None, enabled: bool = True
) -> AlertReceiver:
    """Create a receiver with a new random ``secret``.

    Raises:
        InvalidInput: ``invalid_name`` and those of ``receiver_target_validate``.
        Conflict: ``alert_receiver_exists``.
    """
    name_validate("alert receiver", name)
    emails = [e.strip() for e in emails or [] if e.strip()]
    receiver_target_validate(kind, url, emails)
    with created_once("alert_receiver", name):
        return AlertReceiver.objects.create(
            name=name,
            kind=kind,
            url=url if kind != AlertReceiver.Kind.EMAIL else "",
            emails=emails if kind == AlertReceiver.Kind.EMAIL else [],
            secret=secrets.token_hex(32),
            enabled=enabled,
        )


def receiver_update(
    *,
    name: str,
    url: str | None = None,
    emails: list[str] | None = None,
    enabled: bool | None = None,
) -> AlertReceiver:
    """Change a receiver's target (``url`` or ``emails``, as its kind needs; the other is not
    read) and whether it is ``enabled``; its kind and secret stay. An argument left ``None``
    keeps what the receiver has (the API's PATCH sends only what changes; the console's form
    sends everything).

    Raises:
        NotFound: ``alert_receiver_not_found``. InvalidInput: as ``receiver_target_validate``.
    """
    with transaction.atomic():
        receiver = AlertReceiver.objects.select_for_update().filter(name=name).first()
        if receiver is None:
            raise not_found("alert_receiver", name)
        url = receiver.url if url is None else url
        emails = receiver.emails if emails is None else [e.strip() for e in emails if e.strip()]
        receiver_target_validate(receiver.kind, url, emails)
        if receiver.kind == AlertReceiver.Kind.EMAIL:
            receiver.emails = emails
        else:
            receiver.url = url
        if enabled is not None:
            receiver.enabled = enabled
        receiver.save()
    return receiver


def receiver_delete(*, name: str) -> int:
    """Delete a receiver; its pending notifications fail at once ("the receiver was
    deleted"), shown in the console with the others. Returns how many were failed.

    Raises:
        NotFound: ``alert_receiver_not_found``.
    """
    with transaction.atomic():
        receiver = AlertReceiver.objects.select_for_update().filter(name=name).first()
        if receiver is None:
            raise not_found("alert_receiver", name)
        failed = AlertNotification.objects.filter(
            receiver=receiver, state=AlertNotification.State.PENDING
        ).update(state=AlertNotification.State.FAILED, last_error="the receiver was deleted")
        receiver.delete()
    return failed
