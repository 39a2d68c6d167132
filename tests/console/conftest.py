"""Console users of each role, for every console test.

- ``console_user(role, username=...)``: a new user of role ``viewer``, ``operator`` or
  ``admin`` (made by ``console.services.console_user_create``), or with no console permission
  for ``None``.
- ``signed_in(client, role)``: force-log a Django test client in as a new user of ``role``.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client

from console.services import console_user_create

PASSWORD = "correct-horse-battery"  # every test user's password

_numbers = count(1)


def console_user_make(role: str | None, username: str | None = None) -> AbstractUser:
    """A new user of ``role`` (``None``: a user with no console permission), password
    ``PASSWORD``. ``username`` defaults to ``<role>-<n>`` (unique within the test run)."""
    username = username or f"{role or 'nobody'}-{next(_numbers)}"
    if role is None:
        return get_user_model().objects.create_user(username, password=PASSWORD)
    return console_user_create(username=username, role=role, password=PASSWORD)


def signed_in(client: Client, role: str | None, username: str | None = None) -> AbstractUser:
    """Sign ``client`` in (``force_login``) as a new user of ``role``; returns the user."""
    user = console_user_make(role, username)
    client.force_login(user)
    return user


@pytest.fixture
def console_user(db) -> Callable[..., AbstractUser]:
    """``console_user("operator")`` / ``console_user(None, username="mallory")``: a factory of
    new users of a console role (see ``console_user_make``)."""
    return console_user_make
