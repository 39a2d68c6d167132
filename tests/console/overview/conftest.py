"""``console_client(role)``: a test client signed in as a new user of that console role
(``tests/console/conftest.py``); shared with ``tests/console/topology``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client

from tests.console.conftest import signed_in


@pytest.fixture
def console_client(db) -> Callable[[str | None], Client]:
    """``console_client("viewer")``: a Django test client signed in as a new user of that
    role (viewer, operator, admin), or with no console permission for ``None``."""

    def make(role: str | None) -> Client:
        client = Client()
        signed_in(client, role)
        return client

    return make
