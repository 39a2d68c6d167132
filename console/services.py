"""Console writes: the console's users.

``console_user_create`` is the one place that makes a console user of a role (a full one, or
an operator scoped to named producer and consumer groups); the management command
``create_console_user`` and the tests call it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import (
    MinimumLengthValidator,
    get_default_password_validators,
    validate_password,
)
from django.core.exceptions import ValidationError
from django.db import transaction

from broker.errors import InvalidInput
from broker.services.access.grants import operator_grants_set
from console.roles import ROLES, Role, roles_ensure

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

MIN_PASSWORD_LENGTH = 8  # characters, when settings.AUTH_PASSWORD_VALIDATORS configures none


def console_password_validate(password: str, user: AbstractUser | None = None) -> None:
    """Check ``password`` with ``settings.AUTH_PASSWORD_VALIDATORS``; when none are configured,
    require at least ``MIN_PASSWORD_LENGTH`` (8) characters.

    Raises ``django.core.exceptions.ValidationError`` listing every failed rule.
    """
    validators = get_default_password_validators() or [
        MinimumLengthValidator(min_length=MIN_PASSWORD_LENGTH)
    ]
    validate_password(password, user=user, password_validators=validators)


@transaction.atomic
def console_user_create(
    *,
    username: str,
    role: Role,
    password: str | None,
    producer_groups: Collection[str] = (),
    consumer_groups: Collection[str] = (),
) -> AbstractUser:
    """Create the user ``username`` (or update the existing one) as a console user of ``role``.

    - ``role``: ``viewer``, ``operator`` or ``admin`` (``console.roles``); the user ends up in
      exactly that role's group (removed from the other role groups; groups that are not
      console roles are kept).
    - ``producer_groups`` / ``consumer_groups`` (``operator`` only): an operator scoped to
      those groups (``broker.rules.grants``): the user is put in the ``viewer`` group (sees
      everything) and given exactly these operator grants (``broker.services.access.grants``); it
      acts on the transactions of those producer groups and operates those consumer groups
      only. Without groups every earlier grant is removed (a full operator, a viewer or an
      admin has none).
      An admin also gets ``is_staff`` so ``/admin/`` opens (never ``is_superuser``); the other
      roles lose ``is_staff`` unless the user is a superuser.
    - ``password``: set when given (validated by ``console_password_validate``); ``None`` keeps
      an existing user's password and is refused for a new user.

    Returns the saved user. Raises ``ValidationError`` for an unknown role, an empty username,
    a missing password for a new user, a password the validators refuse, groups for another
    role than ``operator``, or a group name outside ``^[%|a-zA-Z0-9_-]{1,127}$``.
    """
    if role not in ROLES:
        raise ValidationError(f"Unknown role {role!r}: use one of {', '.join(ROLES)}.", code="role")
    scoped = bool(producer_groups or consumer_groups)
    if scoped and role != "operator":
        raise ValidationError(
            "Producer and consumer groups make a scoped operator: use them with the role operator.",
            code="groups",
        )
    username = username.strip()
    if not username:
        raise ValidationError("A username is required.", code="username")
    roles_ensure()
    model = get_user_model()
    user = model.objects.filter(**{model.USERNAME_FIELD: username}).first()
    if user is None:
        if password is None:
            raise ValidationError("A new user needs a password.", code="password")
        user = model(**{model.USERNAME_FIELD: username})
    if password is not None:
        console_password_validate(password, user)
        user.set_password(password)
    user.is_active = True
    user.is_staff = role == "admin" or user.is_superuser
    user.save()
    group = "viewer" if scoped else role
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(name=group))
    user.groups.add(Group.objects.get(name=group))
    try:
        operator_grants_set(
            user_id=user.pk,
            producer_groups=producer_groups,
            consumer_groups=consumer_groups,
            granted_by="create_console_user",
        )
    except InvalidInput as exc:
        raise ValidationError(exc.message, code="groups") from exc
    return user
